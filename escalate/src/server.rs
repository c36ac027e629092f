//! The host's accept step for one Escalation Socket connection.
//!
//! ```text
//! let acceptor = tokio_rustls::TlsAcceptor::from(anchor.server_config(&server_cert)?);
//! let (io, _) = listener.accept().await?;
//! let mut tls = server::accept(&acceptor, io, &identity).await?;   // drop on error
//! let req = protocol::read_request_async(&mut tls).await?;        // strict decode
//! let key = sessions.public_key(&req.session_id)?;                 // the host's registry
//! let ok = signing::verify_request(&req, &VerifyContext::new(&key, identity.profile()))?;
//! seen_ids.insert_unique(ok.replay_key(), ok.forget_after())?;     // the host's redb store
//! match classify::classify(&req.command, &rules) { ... }
//! protocol::write_response_async(&mut tls, &response).await?;
//! ```
//!
//! The caller should bound the whole exchange up to the request with a
//! timeout, so a silent peer cannot hold a task forever.

use tokio::io::{AsyncRead, AsyncWrite};
/// Re-exported so the host uses the same tokio-rustls.
pub use tokio_rustls::TlsAcceptor;
pub use tokio_rustls::server::TlsStream;

use crate::trust::{ALPN, IdentityError, SandboxIdentity, check_peer_identity};

/// Why a connection was dropped before any payload was read.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    /// The TLS handshake failed: no client certificate, a certificate from
    /// another CA, expired, without clientAuth, or not TLS at all.
    #[error("TLS handshake failed: {0}")]
    Handshake(std::io::Error),
    #[error("the client did not negotiate ALPN `lazaret-escalation/1`")]
    Alpn,
    #[error("client identity refused: {0}")]
    Identity(#[from] IdentityError),
}

impl AcceptError {
    /// The client presented no certificate at all (what the self-test's
    /// probe of the socket does; an agent can do the same).
    pub fn no_client_certificate(&self) -> bool {
        matches!(self, AcceptError::Handshake(e)
            if e.get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                .is_some_and(|r| matches!(r, rustls::Error::NoCertificatesPresented)))
    }
}

/// Completes the mTLS handshake, then requires the negotiated ALPN and the
/// peer certificate's single URI SAN to equal `expected`. On error the
/// stream is dropped, before a byte of payload is read.
pub async fn accept<IO>(
    acceptor: &TlsAcceptor,
    io: IO,
    expected: &SandboxIdentity,
) -> Result<TlsStream<IO>, AcceptError>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let tls = acceptor.accept(io).await.map_err(AcceptError::Handshake)?;
    let (_, conn) = tls.get_ref();
    if conn.alpn_protocol() != Some(ALPN) {
        return Err(AcceptError::Alpn);
    }
    check_peer_identity(conn.peer_certificates(), expected)?;
    Ok(tls)
}
