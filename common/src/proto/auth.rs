//! Challenge/response authentication of the control connection with a shared secret.
//!
//! Each end sends a fresh 32-byte nonce in its Hello. The copier proves the secret with
//! `HMAC-SHA256(secret, "tcopy-v1 copier" | intercept_nonce | copier_nonce)`, the intercept with
//! `HMAC-SHA256(secret, "tcopy-v1 intercept" | copier_nonce | intercept_nonce)`; the distinct
//! labels and nonce orders mean neither MAC can be replayed as the other. Verification runs in
//! constant time (`hmac`'s `verify_slice`). Without a secret (both ends explicitly `--no-secret`)
//! the MACs are all zero and are not checked.

use std::path::Path;

use hmac::{Hmac, Mac};
use rand::rngs::OsRng;
use rand::TryRngCore;
use sha2::Sha256;

use super::ProtoError;

type HmacSha256 = Hmac<Sha256>;

/// Label mixed into the copier's MAC.
const COPIER_LABEL: &[u8] = b"tcopy-v1 copier";
/// Label mixed into the intercept's MAC.
const INTERCEPT_LABEL: &[u8] = b"tcopy-v1 intercept";

/// A fresh nonce from the operating system's random number generator.
pub fn nonce() -> Result<[u8; 32], ProtoError> {
    let mut n = [0u8; 32];
    OsRng
        .try_fill_bytes(&mut n)
        .map_err(|e| ProtoError::Rng(e.to_string()))?;
    Ok(n)
}

fn mac(secret: &[u8], label: &[u8], first: &[u8; 32], second: &[u8; 32]) -> HmacSha256 {
    // HMAC accepts keys of any length; this cannot fail.
    let mut m = <HmacSha256 as Mac>::new_from_slice(secret).expect("HMAC takes any key length");
    m.update(label);
    m.update(first);
    m.update(second);
    m
}

/// The MAC the copier sends in `Auth`.
pub fn copier_mac(secret: &[u8], intercept_nonce: &[u8; 32], copier_nonce: &[u8; 32]) -> [u8; 32] {
    mac(secret, COPIER_LABEL, intercept_nonce, copier_nonce)
        .finalize()
        .into_bytes()
        .into()
}

/// The MAC the intercept sends in `AuthOk`.
pub fn intercept_mac(
    secret: &[u8],
    copier_nonce: &[u8; 32],
    intercept_nonce: &[u8; 32],
) -> [u8; 32] {
    mac(secret, INTERCEPT_LABEL, copier_nonce, intercept_nonce)
        .finalize()
        .into_bytes()
        .into()
}

/// Check, in constant time, the copier's MAC.
pub fn verify_copier_mac(
    secret: &[u8],
    intercept_nonce: &[u8; 32],
    copier_nonce: &[u8; 32],
    got: &[u8; 32],
) -> Result<(), ProtoError> {
    mac(secret, COPIER_LABEL, intercept_nonce, copier_nonce)
        .verify_slice(got)
        .map_err(|_| ProtoError::AuthFailed)
}

/// Check, in constant time, the intercept's MAC.
pub fn verify_intercept_mac(
    secret: &[u8],
    copier_nonce: &[u8; 32],
    intercept_nonce: &[u8; 32],
    got: &[u8; 32],
) -> Result<(), ProtoError> {
    mac(secret, INTERCEPT_LABEL, copier_nonce, intercept_nonce)
        .verify_slice(got)
        .map_err(|_| ProtoError::AuthFailed)
}

/// Read the shared secret from `path`: its bytes with trailing `\n`/`\r\n` removed. An empty
/// secret is refused.
pub fn load_secret(path: &Path) -> Result<Vec<u8>, ProtoError> {
    let mut bytes = std::fs::read(path).map_err(|source| ProtoError::SecretFile {
        path: path.to_path_buf(),
        source,
    })?;
    while matches!(bytes.last(), Some(b'\n' | b'\r')) {
        bytes.pop();
    }
    if bytes.is_empty() {
        return Err(ProtoError::SecretEmpty(path.to_path_buf()));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 32] = [0xaa; 32];
    const B: [u8; 32] = [0xbb; 32];

    #[test]
    fn macs_verify_with_the_same_secret_only() {
        let m = copier_mac(b"s3cret", &A, &B);
        verify_copier_mac(b"s3cret", &A, &B, &m).unwrap();
        assert!(matches!(
            verify_copier_mac(b"other", &A, &B, &m),
            Err(ProtoError::AuthFailed)
        ));
        // Swapped nonces give another MAC.
        assert!(verify_copier_mac(b"s3cret", &B, &A, &m).is_err());
        let i = intercept_mac(b"s3cret", &B, &A);
        verify_intercept_mac(b"s3cret", &B, &A, &i).unwrap();
        assert!(verify_intercept_mac(b"x", &B, &A, &i).is_err());
    }

    #[test]
    fn copier_and_intercept_macs_differ() {
        // The labels keep one side's MAC from being reflected as the other's.
        assert_ne!(copier_mac(b"k", &A, &B), intercept_mac(b"k", &A, &B));
        assert!(verify_intercept_mac(b"k", &A, &B, &copier_mac(b"k", &A, &B)).is_err());
    }

    #[test]
    fn mac_matches_rfc_hmac_construction() {
        // Independent computation: HMAC(K, m) = H((K^opad) | H((K^ipad) | m)) with a short key.
        use sha2::Digest;
        let key = b"key";
        let mut k = [0u8; 64];
        k[..key.len()].copy_from_slice(key);
        let mut msg = Vec::new();
        msg.extend_from_slice(COPIER_LABEL);
        msg.extend_from_slice(&A);
        msg.extend_from_slice(&B);
        let inner = Sha256::new()
            .chain_update(k.map(|b| b ^ 0x36))
            .chain_update(&msg)
            .finalize();
        let outer: [u8; 32] = Sha256::new()
            .chain_update(k.map(|b| b ^ 0x5c))
            .chain_update(inner)
            .finalize()
            .into();
        assert_eq!(copier_mac(key, &A, &B), outer);
    }

    #[test]
    fn nonces_are_fresh() {
        assert_ne!(nonce().unwrap(), nonce().unwrap());
    }

    #[test]
    fn secret_file_is_trimmed_and_empty_refused() {
        let dir = std::env::temp_dir().join(format!("tcopy-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("s");
        std::fs::write(&f, b"hunter2\r\n").unwrap();
        assert_eq!(load_secret(&f).unwrap(), b"hunter2");
        std::fs::write(&f, b"\n").unwrap();
        let e = load_secret(&f).unwrap_err();
        assert!(matches!(e, ProtoError::SecretEmpty(_)));
        assert!(e.to_string().contains(&f.display().to_string()), "{e}");
        let missing = dir.join("missing");
        let e = load_secret(&missing).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
