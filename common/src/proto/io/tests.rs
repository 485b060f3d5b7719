//! Handshake tests over in-memory duplex pipes and a localhost TCP connection.

use std::time::Duration;

use tokio::io::{duplex, AsyncWriteExt, DuplexStream};

use super::*;
use crate::proto::error_code;

const SECRET: &[u8] = b"correct horse battery staple";

async fn pair(
    client_secret: Option<&[u8]>,
    server_secret: Option<&[u8]>,
) -> (
    Result<Established<DuplexStream>, ProtoError>,
    Result<Established<DuplexStream>, ProtoError>,
) {
    let (a, b) = duplex(64 * 1024);
    let cs = client_secret.map(<[u8]>::to_vec);
    let ss = server_secret.map(<[u8]>::to_vec);
    let server =
        tokio::spawn(async move { server_handshake(b, ss.as_deref(), "intercept-test").await });
    let client = client_handshake(a, cs.as_deref(), "copier-test").await;
    (client, server.await.unwrap())
}

#[tokio::test]
async fn good_secret_connects_and_messages_flow() {
    let (c, s) = pair(Some(SECRET), Some(SECRET)).await;
    let mut c = c.unwrap();
    let mut s = s.unwrap();
    assert_eq!(c.peer.software, "intercept-test");
    assert_eq!(c.peer.role, Role::Intercept);
    assert_eq!(s.peer.software, "copier-test");
    assert!(s.peer.auth_required);

    let reg = Message::Register { tuples: vec![] };
    c.writer
        .write_messages(&[reg.clone(), Message::Ping { token: 9 }])
        .await
        .unwrap();
    assert_eq!(s.reader.read_message().await.unwrap(), Some(reg));
    assert_eq!(
        s.reader.read_message().await.unwrap(),
        Some(Message::Ping { token: 9 })
    );

    let recs = vec![
        Record {
            orig_len: 60,
            headers: vec![1, 2, 3],
            payload: vec![],
            stamp: 0,
        };
        5
    ];
    s.writer.write_records(&recs).await.unwrap();
    assert_eq!(
        c.reader.read_message().await.unwrap(),
        Some(Message::Records { records: recs })
    );

    // Clean close between frames reads as None.
    s.writer.shutdown().await.unwrap();
    assert_eq!(c.reader.read_message().await.unwrap(), None);
}

#[tokio::test]
async fn wrong_secret_is_refused_by_the_intercept() {
    let (c, s) = pair(Some(b"wrong"), Some(SECRET)).await;
    assert!(matches!(s, Err(ProtoError::AuthFailed)), "{s:?}");
    match c {
        Err(ProtoError::Remote { code, message }) => {
            assert_eq!(code, error_code::AUTH_FAILED);
            assert!(message.contains("authentication failed"), "{message}");
        }
        other => panic!("copier should be refused, got {other:?}"),
    }
}

#[tokio::test]
async fn copier_refuses_an_intercept_that_does_not_know_the_secret() {
    // A fake intercept that accepts any Auth and answers with a MAC it cannot compute.
    let (a, b) = duplex(64 * 1024);
    let fake = tokio::spawn(async move {
        let (r, w) = tokio::io::split(b);
        let mut reader = FrameReader::new(r);
        let mut writer = FrameWriter::new(w);
        let hello = Hello::new(Role::Intercept, true, [3; 32], "impostor");
        writer.write_message(&Message::Hello(hello)).await.unwrap();
        assert!(matches!(
            reader.read_message().await.unwrap(),
            Some(Message::Hello(_))
        ));
        assert!(matches!(
            reader.read_message().await.unwrap(),
            Some(Message::Auth { .. })
        ));
        writer
            .write_message(&Message::AuthOk { mac: [0x42; 32] })
            .await
            .unwrap();
        reader.read_message().await.unwrap()
    });
    let c = client_handshake(a, Some(SECRET), "copier-test").await;
    assert!(matches!(c, Err(ProtoError::AuthFailed)), "{c:?}");
    // The copier told the impostor why.
    match fake.await.unwrap() {
        Some(Message::Error { code, .. }) => assert_eq!(code, error_code::AUTH_FAILED),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn no_secret_mode_works_when_both_ends_agree() {
    let (c, s) = pair(None, None).await;
    let mut c = c.unwrap();
    let s = s.unwrap();
    assert!(!s.peer.auth_required);
    drop(s);
    assert_eq!(c.reader.read_message().await.unwrap(), None);
}

#[tokio::test]
async fn secret_on_one_end_only_is_refused_with_a_clear_reason() {
    let (c, s) = pair(None, Some(SECRET)).await;
    let e = s.unwrap_err();
    assert!(matches!(e, ProtoError::AuthMode(_)), "{e:?}");
    assert!(e.to_string().contains("requires a shared secret"), "{e}");
    assert!(c.is_err());

    let (c, s) = pair(Some(SECRET), None).await;
    assert!(matches!(s, Err(ProtoError::AuthMode(_))), "{s:?}");
    let e = c.unwrap_err();
    assert!(e.to_string().contains("secret"), "{e}");
}

#[tokio::test]
async fn version_mismatch_names_both_versions() {
    let (a, b) = duplex(64 * 1024);
    let future_copier = tokio::spawn(async move {
        let (r, w) = tokio::io::split(a);
        let mut reader = FrameReader::new(r);
        let mut writer = FrameWriter::new(w);
        let mut hello = Hello::new(Role::Copier, false, [1; 32], "copier-from-the-future");
        hello.version = 7;
        writer.write_message(&Message::Hello(hello)).await.unwrap();
        let first = reader.read_message().await.unwrap();
        let second = reader.read_message().await.unwrap();
        let third = reader.read_message().await.unwrap();
        (first, second, third)
    });
    let e = server_handshake(b, None, "intercept-test")
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            ProtoError::VersionMismatch {
                ours: VERSION,
                theirs: 7
            }
        ),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(
        text.contains(&format!("version {VERSION}")) && text.contains("version 7"),
        "{text}"
    );
    drop(e);
    let (first, second, third) = future_copier.await.unwrap();
    assert!(matches!(first, Some(Message::Hello(_))));
    match second {
        Some(Message::Error { code, message }) => {
            assert_eq!(code, error_code::VERSION_MISMATCH);
            assert!(
                message.contains(&format!("version {VERSION}")) && message.contains("version 7"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    // And then the connection is closed.
    assert_eq!(third, None);
}

#[tokio::test]
async fn copier_sees_the_intercept_version_refusal() {
    // A real copier against an intercept of another version: the copier detects it itself.
    let (a, b) = duplex(64 * 1024);
    tokio::spawn(async move {
        let (_r, w) = tokio::io::split(b);
        let mut writer = FrameWriter::new(w);
        let mut hello = Hello::new(Role::Intercept, false, [1; 32], "old");
        hello.version = 0;
        writer.write_message(&Message::Hello(hello)).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
    });
    let e = client_handshake(a, None, "copier-test").await.unwrap_err();
    assert!(
        matches!(
            e,
            ProtoError::VersionMismatch {
                ours: VERSION,
                theirs: 0
            }
        ),
        "{e:?}"
    );
}

#[tokio::test]
async fn wrong_role_is_refused() {
    let (a, b) = duplex(64 * 1024);
    let t = tokio::spawn(async move { client_handshake(b, None, "copier-2").await });
    let e = client_handshake(a, None, "copier-1").await.unwrap_err();
    assert!(
        matches!(
            e,
            ProtoError::WrongRole {
                expected: Role::Intercept,
                got: Role::Copier
            }
        ),
        "{e:?}"
    );
    assert!(t.await.unwrap().is_err());
}

#[tokio::test]
async fn silent_peer_times_out() {
    let (a, _b) = duplex(1024);
    let t0 = std::time::Instant::now();
    let e = server_handshake_timeout(a, Some(SECRET), "i", Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(matches!(e, ProtoError::Timeout(_)), "{e:?}");
    assert!(t0.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn garbage_peer_is_refused() {
    let (a, mut b) = duplex(1024);
    b.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let e = server_handshake(a, Some(SECRET), "i").await.unwrap_err();
    // "GET " as a length is far above the limit.
    assert!(matches!(e, ProtoError::FrameTooLarge { .. }), "{e:?}");
}

#[tokio::test]
async fn peer_closing_mid_frame_is_an_error() {
    let (a, mut b) = duplex(1024);
    b.write_all(&[0, 0, 0, 9, 8, 1]).await.unwrap();
    drop(b);
    let mut r = FrameReader::new(a);
    assert!(matches!(r.read_message().await, Err(ProtoError::Closed(_))));
}

#[tokio::test]
async fn handshake_over_localhost_tcp() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (sock, _) = listener.accept().await.unwrap();
        let mut s = server_handshake(sock, Some(SECRET), "intercept-test")
            .await
            .unwrap();
        match s.reader.read_message().await.unwrap() {
            Some(Message::Ping { token }) => s
                .writer
                .write_message(&Message::Pong { token, clock: 0 })
                .await
                .unwrap(),
            other => panic!("{other:?}"),
        }
    });
    let sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut c = client_handshake(sock, Some(SECRET), "copier-test")
        .await
        .unwrap();
    c.writer
        .write_message(&Message::Ping { token: 77 })
        .await
        .unwrap();
    assert_eq!(
        c.reader.read_message().await.unwrap(),
        Some(Message::Pong {
            token: 77,
            clock: 0
        })
    );
    server.await.unwrap();
}

#[tokio::test]
async fn oversized_frame_before_authentication_is_refused_at_once() {
    // A 100 KB "Hello" announced in full but only partly sent: refused from its length alone,
    // long before the handshake timeout.
    let (a, mut b) = duplex(256 * 1024);
    let mut f = (100_000u32).to_be_bytes().to_vec();
    f.push(1);
    f.extend_from_slice(&[0x55; 8000]);
    b.write_all(&f).await.unwrap();
    let t0 = std::time::Instant::now();
    let e = server_handshake(a, Some(SECRET), "i").await.unwrap_err();
    assert!(
        matches!(
            e,
            ProtoError::FrameTooLarge {
                len: 100_000,
                max: crate::proto::PRE_AUTH_MAX_FRAME
            }
        ),
        "{e:?}"
    );
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    // The peer gets the intercept's Hello, then is told why.
    let mut r = FrameReader::new(b);
    assert!(matches!(
        r.read_message().await.unwrap(),
        Some(Message::Hello(_))
    ));
    match r.read_message().await.unwrap() {
        Some(Message::Error { code, message }) => {
            assert_eq!(code, error_code::PROTOCOL);
            assert!(message.contains("100000"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn big_frames_flow_after_the_handshake() {
    // The pre-authentication limit is lifted once the handshake is done.
    let (c, s) = pair(Some(SECRET), Some(SECRET)).await;
    let mut c = c.unwrap();
    let mut s = s.unwrap();
    let recs = vec![
        Record {
            orig_len: 1500,
            headers: vec![0x45; 52],
            payload: vec![7; 1400],
            stamp: 0,
        };
        700
    ];
    let writer = tokio::spawn(async move {
        s.writer.write_records(&recs).await.unwrap();
        (s, recs)
    });
    let mut got = Vec::new();
    while got.len() < 700 {
        match c.reader.read_message().await.unwrap() {
            Some(Message::Records { records }) => got.extend(records),
            other => panic!("{other:?}"),
        }
    }
    let (_s, recs) = writer.await.unwrap();
    assert_eq!(got, recs);
}

/// Relays bytes between `outer` and `inner`, handing every chunk from the copier to `tamper`
/// with the number of bytes relayed that way before it.
async fn relay(
    outer: DuplexStream,
    inner: DuplexStream,
    mut tamper: impl FnMut(usize, &mut [u8]) + Send + 'static,
) {
    use tokio::io::AsyncReadExt;
    let (mut or, mut ow) = tokio::io::split(outer);
    let (mut ir, mut iw) = tokio::io::split(inner);
    let up = async move {
        let mut buf = vec![0u8; 64 * 1024];
        let mut seen = 0;
        loop {
            let n = match or.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            tamper(seen, &mut buf[..n]);
            seen += n;
            if iw.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = iw.shutdown().await;
    };
    let down = async move {
        let _ = tokio::io::copy(&mut ir, &mut ow).await;
        let _ = ow.shutdown().await;
    };
    tokio::join!(up, down);
}

#[tokio::test]
async fn frames_after_the_handshake_carry_tags_and_a_changed_byte_is_caught() {
    // Copier -> relay -> intercept; the relay learns where the handshake ends by counting the
    // copier's Hello and Auth frames, then flips one byte in the body of the next frame.
    let (copier_side, relay_outer) = duplex(64 * 1024);
    let (relay_inner, intercept_side) = duplex(64 * 1024);
    let handshake_len = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
    let hl = handshake_len.clone();
    tokio::spawn(relay(relay_outer, relay_inner, move |seen, chunk| {
        let at = hl.load(std::sync::atomic::Ordering::SeqCst);
        // Byte 10 of the first frame after the handshake: inside a Register's tuple.
        if at != usize::MAX && seen <= at + 10 && at + 10 < seen + chunk.len() {
            chunk[at + 10 - seen] ^= 0x01;
        }
    }));
    let server = tokio::spawn(async move {
        let mut s = server_handshake(intercept_side, Some(SECRET), "intercept-test")
            .await
            .unwrap();
        s.reader.read_message().await
    });
    let mut c = client_handshake(copier_side, Some(SECRET), "copier-test")
        .await
        .unwrap();
    // The copier sent a Hello and an Auth (36 bytes).
    let mut hello = Vec::new();
    Message::Hello(Hello::new(Role::Copier, true, [0; 32], "copier-test")).encode(&mut hello);
    handshake_len.store(
        hello.len() + 4 + 1 + 32,
        std::sync::atomic::Ordering::SeqCst,
    );
    let t = crate::flow::FourTuple::new(
        "198.19.0.1:1000".parse().unwrap(),
        "198.18.2.2:80".parse().unwrap(),
    );
    c.writer
        .write_message(&Message::Register { tuples: vec![t] })
        .await
        .unwrap();
    let e = server.await.unwrap().unwrap_err();
    assert!(
        matches!(
            e,
            ProtoError::BadTag {
                from: "copier",
                frame: 0
            }
        ),
        "{e:?}"
    );
}

#[tokio::test]
async fn frames_are_tagged_with_a_secret_and_plain_without() {
    // Count the bytes of one Ping after the handshake, as the wire carries them.
    async fn ping_bytes(secret: Option<&'static [u8]>) -> usize {
        let (copier_side, relay_outer) = duplex(64 * 1024);
        let (relay_inner, intercept_side) = duplex(64 * 1024);
        let total = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let t2 = total.clone();
        tokio::spawn(relay(relay_outer, relay_inner, move |_, chunk| {
            t2.fetch_add(chunk.len(), std::sync::atomic::Ordering::SeqCst);
        }));
        let server = tokio::spawn(async move {
            let mut s = server_handshake(intercept_side, secret, "i").await.unwrap();
            let m = s.reader.read_message().await.unwrap();
            (s, m)
        });
        let mut c = client_handshake(copier_side, secret, "c").await.unwrap();
        let before = total.load(std::sync::atomic::Ordering::SeqCst);
        c.writer
            .write_message(&Message::Ping { token: 5 })
            .await
            .unwrap();
        let (_s, m) = server.await.unwrap();
        assert_eq!(m, Some(Message::Ping { token: 5 }));
        total.load(std::sync::atomic::Ordering::SeqCst) - before
    }
    assert_eq!(ping_bytes(None).await, 4 + 1 + 8);
    assert_eq!(
        ping_bytes(Some(SECRET)).await,
        4 + 1 + 8 + crate::proto::auth::TAG_LEN
    );
}

#[tokio::test]
async fn a_reader_with_an_idle_timeout_gives_up_on_a_silent_peer() {
    let (a, mut b) = duplex(1024);
    let mut r = FrameReader::new(a);
    r.set_idle_timeout(Some(Duration::from_millis(100)));
    // A frame in time is read; a partial frame does not count as activity.
    let mut ping = Vec::new();
    Message::Ping { token: 1 }.encode(&mut ping);
    b.write_all(&ping).await.unwrap();
    assert_eq!(
        r.read_message().await.unwrap(),
        Some(Message::Ping { token: 1 })
    );
    b.write_all(&ping[..3]).await.unwrap();
    let t0 = std::time::Instant::now();
    let e = r.read_message().await.unwrap_err();
    assert!(
        matches!(e, ProtoError::Idle(d) if d == Duration::from_millis(100)),
        "{e:?}"
    );
    assert!(t0.elapsed() >= Duration::from_millis(100));
}

/// A fake peer that sends `script` (its Hello first) and returns what it reads back.
async fn scripted_peer(stream: DuplexStream, script: Vec<Message>) -> Vec<Message> {
    let (r, w) = tokio::io::split(stream);
    let mut reader = FrameReader::new(r);
    let mut writer = FrameWriter::new(w);
    for m in &script {
        writer.write_message(m).await.unwrap();
    }
    let mut got = Vec::new();
    while let Ok(Some(m)) = reader.read_message().await {
        got.push(m);
    }
    got
}

#[tokio::test]
async fn a_message_out_of_order_is_refused_at_every_step_of_both_sides() {
    let hello = |role| Message::Hello(Hello::new(role, false, [1; 32], "fake"));
    // (the side under test, what the fake peer sends, the step that refuses, the peer's Error)
    let cases = [
        (
            Role::Intercept,
            vec![Message::Ping { token: 1 }],
            "Hello",
            "intercept: expected Hello, got Ping",
        ),
        (
            Role::Copier,
            vec![Message::Ping { token: 1 }],
            "Hello",
            "copier: expected Hello, got Ping",
        ),
        (
            Role::Intercept,
            vec![hello(Role::Copier), Message::Ping { token: 1 }],
            "Auth",
            "intercept: expected Auth, got Ping",
        ),
        (
            Role::Copier,
            vec![hello(Role::Intercept), Message::Ping { token: 1 }],
            "AuthOk",
            "copier: expected AuthOk, got Ping",
        ),
    ];
    for (side, script, step, told) in cases {
        let (a, b) = duplex(64 * 1024);
        let peer = tokio::spawn(scripted_peer(b, script));
        let e = match side {
            Role::Intercept => server_handshake(a, None, "intercept-test")
                .await
                .map(|_| ()),
            Role::Copier => client_handshake(a, None, "copier-test").await.map(|_| ()),
        }
        .unwrap_err();
        assert!(
            matches!(e, ProtoError::Unexpected { expected, got: "Ping" } if expected == step),
            "{side:?}: {e:?}"
        );
        let said = peer.await.unwrap();
        match said.last() {
            Some(Message::Error { code, message }) => {
                assert_eq!(*code, error_code::PROTOCOL);
                assert_eq!(message, told);
            }
            other => panic!("{side:?} {step}: {other:?}"),
        }
    }
}
