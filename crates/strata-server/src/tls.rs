//! TLS for `--tls-port`: the server's configuration from PEM files, and a connection's stream,
//! plain or encrypted, behind one pair of non-blocking `read` and `write` calls.

use std::io::{self, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mio::net::TcpStream;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection};

/// Whether clients must show a certificate (`tls-auth-clients`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// A certificate signed by the CA is required.
    Yes,
    /// None is asked for.
    No,
    /// One is asked for; a client without one is served, one with a bad one is refused.
    Optional,
}

impl std::str::FromStr for ClientAuth {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "yes" => Ok(ClientAuth::Yes),
            "no" => Ok(ClientAuth::No),
            "optional" => Ok(ClientAuth::Optional),
            other => Err(format!(
                "unknown tls-auth-clients {other:?} (yes, no or optional)"
            )),
        }
    }
}

/// What TLS is built from.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The CA that signs client certificates (needed unless `auth` is `No`).
    pub ca: Option<PathBuf>,
    pub auth: ClientAuth,
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read certificates from {}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("cannot read certificates from {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("no certificate in {}", path.display()));
    }
    Ok(certs)
}

/// The server's TLS configuration, read from its files now.
pub(crate) fn server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, String> {
    let chain = certs(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("cannot read the private key {}: {e}", files.key.display()))?;
    let builder = ServerConfig::builder();
    let builder = match files.auth {
        ClientAuth::No => builder.with_no_client_auth(),
        auth => {
            let ca = files
                .ca
                .as_ref()
                .ok_or("tls-auth-clients needs --tls-ca-cert-file (or tls-auth-clients no)")?;
            let mut roots = RootCertStore::empty();
            for c in certs(ca)? {
                roots
                    .add(c)
                    .map_err(|e| format!("bad CA certificate in {}: {e}", ca.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder(Arc::new(roots));
            let verifier = if auth == ClientAuth::Optional {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier.build().map_err(|e| e.to_string())?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("the certificate and key do not go together: {e}"))?;
    Ok(Arc::new(config))
}

/// How a replica connects to its primary's TLS port: trusting the CA of
/// `tls-ca-cert-file`, and showing the server's own certificate when the primary asks.
pub(crate) fn client_config(files: &TlsFiles) -> Result<Arc<rustls::ClientConfig>, String> {
    let ca = files
        .ca
        .as_ref()
        .ok_or("tls-replication needs --tls-ca-cert-file, the CA to trust the primary by")?;
    let mut roots = RootCertStore::empty();
    for c in certs(ca)? {
        roots
            .add(c)
            .map_err(|e| format!("bad CA certificate in {}: {e}", ca.display()))?;
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("cannot read the private key {}: {e}", files.key.display()))?;
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(certs(&files.cert)?, key)
        .map_err(|e| format!("the certificate and key do not go together: {e}"))?;
    Ok(Arc::new(config))
}

/// A connection's socket, plain or under TLS.
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls {
        sock: TcpStream,
        tls: Box<ServerConnection>,
    },
}

impl Stream {
    pub(crate) fn socket(&mut self) -> &mut TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls { sock, .. } => sock,
        }
    }

    /// A short read says the socket is empty (the next bytes raise a new readiness edge).
    /// Not under TLS, where the socket may hold records that were not read yet.
    pub(crate) fn short_read_drains(&self) -> bool {
        matches!(self, Stream::Plain(_))
    }

    /// Reads plaintext. `WouldBlock` when none is ready; 0 at the end of input.
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (sock, tls) = match self {
            Stream::Plain(s) => return s.read(buf),
            Stream::Tls { sock, tls } => (sock, tls),
        };
        loop {
            match tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            if tls.read_tls(sock)? == 0 {
                return Ok(0);
            }
            if let Err(e) = tls.process_new_packets() {
                // The alert that says why goes out before the connection closes.
                let _ = tls.write_tls(sock);
                return Err(io::Error::new(ErrorKind::InvalidData, e));
            }
            // The handshake's answers, if it is under way.
            match flush(sock, tls) {
                Err(e) if e.kind() != ErrorKind::WouldBlock => return Err(e),
                _ => {}
            }
        }
    }

    /// Writes plaintext: under TLS it is encrypted into the connection's buffer, which is
    /// sent as far as the socket takes it ([`Stream::flush_pending`] sends the rest).
    pub(crate) fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let (sock, tls) = match self {
            Stream::Plain(s) => return s.write(buf),
            Stream::Tls { sock, tls } => (sock, tls),
        };
        if tls.wants_write() {
            flush(sock, tls)?;
        }
        let n = tls.writer().write(buf)?;
        match flush(sock, tls) {
            Err(e) if e.kind() != ErrorKind::WouldBlock => return Err(e),
            _ => {}
        }
        if n == 0 && !buf.is_empty() {
            return Err(ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    /// True while encrypted bytes wait for the socket.
    pub(crate) fn has_pending(&self) -> bool {
        match self {
            Stream::Plain(_) => false,
            Stream::Tls { tls, .. } => tls.wants_write(),
        }
    }

    /// Under TLS, tells the peer that the session ends here (close_notify), so that it can
    /// tell a clean end from a cut-off one; best effort, as the connection is closing.
    pub(crate) fn close_notify(&mut self) {
        if let Stream::Tls { sock, tls } = self {
            tls.send_close_notify();
            let _ = flush(sock, tls);
        }
    }

    /// Sends what waits; `WouldBlock` when the socket is full.
    pub(crate) fn flush_pending(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(_) => Ok(()),
            Stream::Tls { sock, tls } => flush(sock, tls),
        }
    }
}

fn flush(sock: &mut TcpStream, tls: &mut ServerConnection) -> io::Result<()> {
    while tls.wants_write() {
        match tls.write_tls(sock) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::sync::Arc;
    use std::time::Duration;

    use rcgen::{CertificateParams, KeyPair};
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

    use super::*;

    /// Encrypted bytes the socket cannot take yet are reported by `has_pending`, and
    /// `flush_pending` sends them once it can: a client that reads late gets every byte.
    #[test]
    fn encrypted_bytes_that_wait_are_reported_and_sent_later() {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let server = ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(cert.der().clone()).unwrap();
        let client = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        const TOTAL: usize = 8 << 20;
        let reader = std::thread::spawn(move || {
            let conn = rustls::ClientConnection::new(
                Arc::new(client),
                ServerName::try_from("localhost").unwrap(),
            )
            .unwrap();
            let sock = std::net::TcpStream::connect(addr).unwrap();
            sock.set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut tls = rustls::StreamOwned::new(conn, sock);
            tls.write_all(b"hello").unwrap();
            // Late, so that the server's socket fills first.
            std::thread::sleep(Duration::from_millis(300));
            let mut got = vec![0u8; TOTAL];
            // And late again halfway, so that the bytes wait for `flush_pending` a while.
            let (head, tail) = got.split_at_mut(TOTAL / 2);
            tls.read_exact(head)?;
            std::thread::sleep(Duration::from_millis(300));
            tls.read_exact(tail).map(|_| got)
        });
        let (sock, _) = listener.accept().unwrap();
        sock.set_nonblocking(true).unwrap();
        let mut conn = ServerConnection::new(Arc::new(server)).unwrap();
        // No cap on buffered plaintext: a write takes all it is given, and what the socket
        // cannot take waits in the connection for `flush_pending`.
        conn.set_buffer_limit(None);
        let mut stream = Stream::Tls {
            sock: TcpStream::from_std(sock),
            tls: Box::new(conn),
        };
        let mut buf = [0u8; 16];
        let n = loop {
            match stream.read(&mut buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(&buf[..n], b"hello");
        let data: Vec<u8> = (0..TOTAL).map(|i| (i % 251) as u8).collect();
        let mut sent = 0;
        let mut saw_pending = false;
        while sent < TOTAL {
            match stream.write(&data[sent..]) {
                Ok(n) => {
                    sent += n;
                    saw_pending |= stream.has_pending();
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    saw_pending |= stream.has_pending();
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(saw_pending, "a full socket left no encrypted bytes waiting");
        loop {
            match stream.flush_pending() {
                Ok(()) => break,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(!stream.has_pending());
        let got = reader.join().unwrap().expect("the client got every byte");
        assert!(got == data, "the client's bytes differ from those written");
    }
}
