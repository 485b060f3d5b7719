"""A WebSocket server that speaks unasked, and a client, for the lab (Debian's
python3-websockets).

  server LOG PORT EVERY PAD
                         serve on PORT; on every connection push `push <n>` and PAD bytes every
                         EVERY seconds without being asked, and append `<unix time> <message>`
                         to LOG for every message a client sends
  client TARGET CONNS N  CONNS connections at once; on each, N times: wait for a push, then send
                         `c<k> <i>`; then keep the connection open for HOLD seconds (pushes go
                         on), and close. Prints `ok <messages>`.
"""
import asyncio, sys, time
import websockets

HOLD = 4.0


async def serve(log_path, port, every, pad):
    log = open(log_path, 'a', buffering=1)

    async def handler(ws, path=None):
        async def pusher():
            n = 0
            while True:
                await asyncio.sleep(every)
                await ws.send(f'push {n} ' + 'x' * pad)
                n += 1
        task = asyncio.create_task(pusher())
        try:
            async for m in ws:
                log.write(f'{time.time():.3f} {m}\n')
        except websockets.ConnectionClosed:
            pass
        finally:
            task.cancel()

    async with websockets.serve(handler, '0.0.0.0', port, ping_interval=None):
        print('listening', flush=True)
        await asyncio.Future()


async def one(uri, k, n):
    async with websockets.connect(uri, ping_interval=None, open_timeout=10) as ws:
        for i in range(n):
            m = await asyncio.wait_for(ws.recv(), 10)
            assert m.startswith('push '), m
            await ws.send(f'c{k} {i}')
        end = time.monotonic() + HOLD
        while time.monotonic() < end:
            try:
                await asyncio.wait_for(ws.recv(), max(0.01, end - time.monotonic()))
            except asyncio.TimeoutError:
                break


async def client(target, conns, n):
    uri = f'ws://{target}/'
    await asyncio.gather(*(one(uri, k, n) for k in range(conns)))
    print('ok', conns * n, flush=True)


if __name__ == '__main__':
    if sys.argv[1] == 'server':
        asyncio.run(serve(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])))
    else:
        asyncio.run(client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
