"""A gRPC server and client for the lab, without .proto files or code generation: grpcio's
generic handlers with bytes in and bytes out (Debian's python3-grpcio).

Service `lab.Echo`, four methods, one per kind of call:
  Unary         one request, one answer
  ServerStream  one request, SERVER_MSGS answers
  ClientStream  CLIENT_MSGS requests, one answer
  Bidi          CLIENT_MSGS requests, each answered at once
Every request message is `<id> <k>` (the call's id, the message's index). A call whose id ends
in `7` is answered with status NOT_FOUND after its messages were read, so the answers carry more
than one grpc-status.

  server LOG PORT [candidate]
                       serve on PORT; append `<method> <id> <messages> <status>` to LOG once per
                       call, when the call ends (so a call is logged once it was read whole);
                       `candidate`: a changed version for `copier --compare` (compare_h2.rs),
                       whose Unary calls with an id ending in `3` fail with INTERNAL
                       'candidate bug' (the other answers are the same)
  client TARGET N      N calls of each kind on ONE channel (one HTTP/2 connection), 16 in flight
                       at once; prints `ok <calls>` and exits 0 when every call got what it should
"""
import sys, threading
from concurrent import futures
import grpc

SERVER_MSGS = 5
CLIENT_MSGS = 4
SERVICE = 'lab.Echo'
ident = lambda b: b


def failing(call_id):
    return call_id.endswith('7')


def server(log_path, port, candidate=False):
    log = open(log_path, 'a', buffering=1)
    lock = threading.Lock()

    def note(method, call_id, n, code):
        with lock:
            log.write(f'{method} {call_id} {n} {code}\n')

    def unary(req, ctx):
        cid = req.decode().split()[0]
        if failing(cid):
            note('Unary', cid, 1, 'NOT_FOUND')
            ctx.abort(grpc.StatusCode.NOT_FOUND, 'no ' + cid)
        if candidate and cid.endswith('3'):
            note('Unary', cid, 1, 'INTERNAL')
            ctx.abort(grpc.StatusCode.INTERNAL, 'candidate bug')
        note('Unary', cid, 1, 'OK')
        return b'echo ' + req

    def server_stream(req, ctx):
        cid = req.decode().split()[0]
        for k in range(SERVER_MSGS):
            yield f'{cid} out {k}'.encode()
        code = 'NOT_FOUND' if failing(cid) else 'OK'
        note('ServerStream', cid, 1, code)
        if failing(cid):
            ctx.abort(grpc.StatusCode.NOT_FOUND, 'no ' + cid)

    def client_stream(it, ctx):
        msgs = [m.decode() for m in it]
        cid = msgs[0].split()[0] if msgs else '-'
        code = 'NOT_FOUND' if failing(cid) else 'OK'
        note('ClientStream', cid, len(msgs), code)
        if failing(cid):
            ctx.abort(grpc.StatusCode.NOT_FOUND, 'no ' + cid)
        return f'{cid} got {len(msgs)}'.encode()

    def bidi(it, ctx):
        n, cid = 0, '-'
        for m in it:
            cid = m.decode().split()[0]
            n += 1
            yield b'echo ' + m
        code = 'NOT_FOUND' if failing(cid) else 'OK'
        note('Bidi', cid, n, code)
        if failing(cid):
            ctx.abort(grpc.StatusCode.NOT_FOUND, 'no ' + cid)

    handlers = {
        'Unary': grpc.unary_unary_rpc_method_handler(unary, ident, ident),
        'ServerStream': grpc.unary_stream_rpc_method_handler(server_stream, ident, ident),
        'ClientStream': grpc.stream_unary_rpc_method_handler(client_stream, ident, ident),
        'Bidi': grpc.stream_stream_rpc_method_handler(bidi, ident, ident),
    }
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
    srv.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    srv.add_insecure_port(f'0.0.0.0:{port}')
    srv.start()
    print('listening', flush=True)
    srv.wait_for_termination()


def client(target, n):
    ch = grpc.insecure_channel(target, options=[('grpc.enable_http_proxy', 0)])
    grpc.channel_ready_future(ch).result(timeout=10)
    path = lambda m: f'/{SERVICE}/{m}'
    unary = ch.unary_unary(path('Unary'), ident, ident)
    sstream = ch.unary_stream(path('ServerStream'), ident, ident)
    cstream = ch.stream_unary(path('ClientStream'), ident, ident)
    bidi = ch.stream_stream(path('Bidi'), ident, ident)

    def expect(cid, fn):
        try:
            fn()
        except grpc.RpcError as e:
            if failing(cid) and e.code() == grpc.StatusCode.NOT_FOUND:
                return
            raise
        if failing(cid):
            raise AssertionError(f'{cid}: no NOT_FOUND')

    def msgs(cid):
        return iter([f'{cid} {k}'.encode() for k in range(CLIENT_MSGS)])

    def one(kind, i):
        cid = f'{kind[0].lower()}{i}'
        if kind == 'Unary':
            expect(cid, lambda: unary.future(f'{cid} 0'.encode(), timeout=20).result())
        elif kind == 'ServerStream':
            def f():
                got = list(sstream(f'{cid} 0'.encode(), timeout=20))
                assert len(got) == SERVER_MSGS, got
            expect(cid, f)
        elif kind == 'ClientStream':
            expect(cid, lambda: cstream(msgs(cid), timeout=20))
        else:
            def f():
                got = list(bidi(msgs(cid), timeout=20))
                assert len(got) == CLIENT_MSGS, got
            expect(cid, f)

    jobs = [(k, i) for i in range(n) for k in ('Unary', 'ServerStream', 'ClientStream', 'Bidi')]
    with futures.ThreadPoolExecutor(max_workers=16) as pool:
        for f in [pool.submit(one, k, i) for k, i in jobs]:
            f.result()
    ch.close()
    print('ok', len(jobs), flush=True)


if __name__ == '__main__':
    if sys.argv[1] == 'server':
        server(sys.argv[2], int(sys.argv[3]), sys.argv[4:] == ['candidate'])
    else:
        client(sys.argv[2], int(sys.argv[3]))
