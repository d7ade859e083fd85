//! The TLS port: a client that trusts the server's CA, client certificates required, optional
//! or refused, and certificates read again on CONFIG SET.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedKey, IsCa, KeyPair};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use strata_server::{ClientAuth, TlsFiles};

mod common;

/// A certificate authority, and certificates it signs.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        Ca {
            cert: params.self_signed(&key).unwrap(),
            key,
        }
    }

    fn sign(&self, names: &[&str]) -> CertifiedKey {
        let params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        CertifiedKey {
            cert,
            key_pair: key,
        }
    }
}

fn write_pem(dir: &Path, name: &str, pem: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, pem).unwrap();
    path
}

/// Sends PING over TLS, trusting `ca`, showing `client` if given; the reply or the error.
fn ping(addr: SocketAddr, ca: &Ca, client: Option<&CertifiedKey>) -> Result<String, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.cert.der().clone()).unwrap();
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    let config = match client {
        Some(c) => builder
            .with_client_auth_cert(
                vec![c.cert.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(c.key_pair.serialize_der())),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let name = ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    tls.write_all(b"*1\r\n$4\r\nPING\r\n")
        .map_err(|e| e.to_string())?;
    let mut buf = [0u8; 64];
    let n = tls.read(&mut buf).map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[test]
fn the_tls_port_serves_trusted_clients_and_refuses_others() {
    let t = tempfile::tempdir().unwrap();
    let ca = Ca::new("strata test CA");
    let server_cert = ca.sign(&["localhost"]);
    let client_cert = ca.sign(&["client"]);
    let stranger_ca = Ca::new("another CA");
    let stranger = stranger_ca.sign(&["client"]);
    let files = TlsFiles {
        cert: write_pem(t.path(), "server.crt", &server_cert.cert.pem()),
        key: write_pem(
            t.path(),
            "server.key",
            &server_cert.key_pair.serialize_pem(),
        ),
        ca: Some(write_pem(t.path(), "ca.crt", &ca.cert.pem())),
        auth: ClientAuth::Yes,
    };
    let server = common::start(&t.path().join("db"), |c| {
        c.tls_port = Some(0);
        c.tls = Some(files.clone());
    });
    let addr = server.tls_addr().unwrap();
    // With the plain port off, the TLS port is all there is.
    let only_tls = common::start(&t.path().join("db2"), |c| {
        c.plain = false;
        c.tls_port = Some(0);
        c.tls = Some(files.clone());
    });
    assert_eq!(Some(only_tls.local_addr()), only_tls.tls_addr());
    assert_eq!(
        ping(only_tls.local_addr(), &ca, Some(&client_cert)).unwrap(),
        "+PONG\r\n"
    );
    drop(only_tls);
    // A client with a certificate from the CA is served.
    assert_eq!(ping(addr, &ca, Some(&client_cert)).unwrap(), "+PONG\r\n");
    // Without one, or with one from another CA, the handshake is refused.
    let err = ping(addr, &ca, None).unwrap_err();
    assert!(
        err.contains("CertificateRequired") || err.contains("alert"),
        "{err}"
    );
    let err = ping(addr, &ca, Some(&stranger)).unwrap_err();
    assert!(err.contains("alert") || err.contains("Unknown"), "{err}");
    // The plain port still speaks plain RESP.
    let mut plain = common::connect(server.local_addr());
    let pong: String = redis::cmd("PING").query(&mut plain).unwrap();
    assert_eq!(pong, "PONG");
    // tls-auth-clients optional: no certificate is served, a bad one still is not.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("tls-auth-clients")
        .arg("optional")
        .query(&mut plain)
        .unwrap();
    assert_eq!(ping(addr, &ca, None).unwrap(), "+PONG\r\n");
    let err = ping(addr, &ca, Some(&stranger)).unwrap_err();
    assert!(err.contains("alert") || err.contains("Unknown"), "{err}");
    // A new certificate, from a new CA, is read on CONFIG SET tls-cert-file.
    let ca2 = Ca::new("strata test CA 2");
    let cert2 = ca2.sign(&["localhost"]);
    let cert2_path = write_pem(t.path(), "server2.crt", &cert2.cert.pem());
    let key2_path = write_pem(t.path(), "server2.key", &cert2.key_pair.serialize_pem());
    // A certificate without its key is refused, and nothing changes.
    let bad: redis::RedisResult<()> = redis::cmd("CONFIG")
        .arg("SET")
        .arg("tls-cert-file")
        .arg(cert2_path.to_str().unwrap())
        .query(&mut plain);
    assert!(bad.unwrap_err().to_string().contains("do not go together"));
    assert_eq!(ping(addr, &ca, Some(&client_cert)).unwrap(), "+PONG\r\n");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("tls-cert-file")
        .arg(cert2_path.to_str().unwrap())
        .arg("tls-key-file")
        .arg(key2_path.to_str().unwrap())
        .query(&mut plain)
        .unwrap();
    assert_eq!(ping(addr, &ca2, Some(&client_cert)).unwrap(), "+PONG\r\n");
    // The client trusts only the old CA: it refuses the new certificate itself.
    let err = ping(addr, &ca, Some(&client_cert)).unwrap_err();
    assert!(err.contains("UnknownIssuer"), "{err}");
    // Large replies cross TLS whole (the encrypted bytes wait for a full socket).
    let big = "x".repeat(3 << 20);
    let _: () = redis::cmd("SET")
        .arg("big")
        .arg(&big)
        .query(&mut plain)
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca2.cert.der().clone()).unwrap();
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![client_cert.cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
                client_cert.key_pair.serialize_der(),
            )),
        )
        .unwrap();
    let conn =
        rustls::ClientConnection::new(Arc::new(config), ServerName::try_from("localhost").unwrap())
            .unwrap();
    let sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let mut request = Vec::new();
    for _ in 0..4 {
        request.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n");
    }
    tls.write_all(&request).unwrap();
    let header = format!("${}\r\n", big.len());
    let want = 4 * (header.len() + big.len() + 2);
    // Read slowly, so that the server's socket stays full to the end and its last bytes
    // wait for writability.
    let mut got = Vec::with_capacity(want);
    let mut buf = [0u8; 16 * 1024];
    while got.len() < want {
        let n = tls
            .read(&mut buf)
            .expect("the rest of the replies never came");
        assert!(n > 0, "the server closed early");
        got.extend_from_slice(&buf[..n]);
        if got.len() % (256 * 1024) < n {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    let one = [header.as_bytes(), big.as_bytes(), b"\r\n"].concat();
    assert_eq!(got, one.repeat(4));
    // A large pipeline in one write: TLS records wait in the socket after each short read,
    // and every one of them must still be read (no new readiness edge comes for them).
    const SETS: usize = 10_000; // replies under the 64 KiB a server holds unread
    let request = b"*3\r\n$3\r\nSET\r\n$4\r\npipe\r\n$64\r\n"
        .iter()
        .chain([b'p'; 64].iter())
        .chain(b"\r\n".iter())
        .copied()
        .collect::<Vec<u8>>()
        .repeat(SETS);
    tls.write_all(&request).unwrap();
    let mut oks = vec![0u8; 5 * SETS];
    tls.read_exact(&mut oks)
        .expect("every reply of the pipeline (a request stranded in the socket never answers)");
    assert_eq!(oks, b"+OK\r\n".repeat(SETS));
    // QUIT ends the session cleanly: +OK, then TLS's close_notify, which the client reads as
    // the end of input rather than as a connection cut off.
    tls.write_all(b"*1\r\n$4\r\nQUIT\r\n").unwrap();
    let mut rest = Vec::new();
    tls.read_to_end(&mut rest)
        .expect("a clean end of the session (close_notify)");
    assert_eq!(rest, b"+OK\r\n");
}

/// The TLS files of a server whose certificate `ca` signed, for `localhost`.
fn files_signed_by(dir: &Path, ca: &Ca, name: &str) -> TlsFiles {
    let cert = ca.sign(&["localhost"]);
    TlsFiles {
        cert: write_pem(dir, &format!("{name}.crt"), &cert.cert.pem()),
        key: write_pem(dir, &format!("{name}.key"), &cert.key_pair.serialize_pem()),
        ca: Some(write_pem(dir, &format!("{name}-ca.crt"), &ca.cert.pem())),
        auth: ClientAuth::Yes,
    }
}

fn replica_get(server: &strata_server::Server, key: &str) -> Option<String> {
    let mut c = common::connect(server.local_addr());
    redis::cmd("GET").arg(key).query(&mut c).unwrap()
}

#[test]
fn a_replica_follows_its_primary_over_tls() {
    let t = tempfile::tempdir().unwrap();
    let ca = Ca::new("strata test CA");
    let primary = common::start(&t.path().join("p"), |c| {
        c.tls_port = Some(0);
        c.tls = Some(files_signed_by(t.path(), &ca, "p"));
    });
    let tls_port = primary.tls_addr().unwrap().port();
    let mut pc = common::connect(primary.local_addr());
    let _: () = redis::cmd("SET")
        .arg("before")
        .arg("1")
        .query(&mut pc)
        .unwrap();
    let replica = common::start(&t.path().join("r"), |c| {
        c.tls_port = Some(0);
        c.tls = Some(files_signed_by(t.path(), &ca, "r"));
        c.replicaof = Some(("localhost".into(), tls_port));
        c.settings = vec![("tls-replication".into(), "yes".into())];
    });
    // A replica that does not trust the primary's CA never links up.
    let other_ca = Ca::new("another CA");
    let stranger = common::start(&t.path().join("s"), |c| {
        c.tls_port = Some(0);
        c.tls = Some(files_signed_by(t.path(), &other_ca, "s"));
        c.replicaof = Some(("localhost".into(), tls_port));
        c.settings = vec![("tls-replication".into(), "yes".into())];
    });
    let _: () = redis::cmd("SET")
        .arg("after")
        .arg("2")
        .query(&mut pc)
        .unwrap();
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut pc).unwrap();
    assert_eq!(acked, 1, "the replica over TLS acknowledged");
    assert_eq!(replica_get(&replica, "before").as_deref(), Some("1"));
    assert_eq!(replica_get(&replica, "after").as_deref(), Some("2"));
    let mut sc = common::connect(stranger.local_addr());
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut sc)
        .unwrap();
    assert!(info.contains("master_link_status:down"), "{info}");
    assert_eq!(replica_get(&stranger, "after"), None);
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut pc)
        .unwrap();
    assert!(info.contains("connected_slaves:1"), "{info}");
    for s in [stranger, replica, primary] {
        s.shutdown().unwrap();
    }
}
