//! Authentication of the control connection with a shared secret: the challenge/response of
//! the handshake, the per-frame tags after it, and loading the secret file.
//!
//! Handshake: each end sends a fresh 32-byte nonce in its Hello. The copier proves the secret
//! with `HMAC-SHA256(secret, "tcopy-v1 copier" | intercept_nonce | copier_nonce)`, the intercept
//! with `HMAC-SHA256(secret, "tcopy-v1 intercept" | copier_nonce | intercept_nonce)`; the
//! distinct labels and nonce orders mean neither MAC can be replayed as the other.
//!
//! After the handshake every frame carries a tag ([`FrameKey`]): each direction has its own
//! session key, `key_c2i = HMAC-SHA256(secret, "tcopy-v2 c2i" | copier_nonce | intercept_nonce)`
//! and `key_i2c = HMAC-SHA256(secret, "tcopy-v2 i2c" | copier_nonce | intercept_nonce)`
//! ([`session_keys`]), and a frame's tag is the first [`TAG_LEN`] bytes of
//! `HMAC-SHA256(key_dir, u64 counter | the frame's bytes before the tag)`, the counter counting
//! the tagged frames of that direction from 0. Fresh nonces make the keys new on every
//! connection, so a frame cannot be replayed into another connection; the counter makes a
//! replayed, reordered or dropped frame fail inside one; the distinct keys make a frame
//! reflected back to its sender fail.
//!
//! Every verification runs in constant time (`hmac`'s `verify_slice`/`verify_truncated_left`).
//! Without a secret (both ends explicitly `--no-secret`) the MACs are all zero and are not
//! checked, and frames carry no tag.
//!
//! The secret file ([`load_secret`]) must be readable by its owner only, hold at least
//! [`MIN_SECRET_LEN`] bytes, and not be a known placeholder ([`PLACEHOLDERS`]).

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
/// Label of the copier -> intercept session key.
const C2I_LABEL: &[u8] = b"tcopy-v2 c2i";
/// Label of the intercept -> copier session key.
const I2C_LABEL: &[u8] = b"tcopy-v2 i2c";

/// Bytes of the tag at the end of every frame after the handshake (a truncated HMAC-SHA256).
pub const TAG_LEN: usize = 16;
/// Shortest secret accepted (after the trailing newline is removed).
pub const MIN_SECRET_LEN: usize = 16;

/// Placeholders refused as secrets: a secret that contains one of these (any case) is a template
/// left as it was, first of all the value of `deploy/k8s/secret.yaml` (`scripts/check-deploy.sh`
/// reads this list and checks that the manifest's value is in it). The lab's secret is not one.
pub const PLACEHOLDERS: &[&str] = &[
    "REPLACE-ME-with-32-random-bytes-base64",
    "replace-me",
    "replace_me",
    "replaceme",
    "change-me",
    "change_me",
    "changeme",
    "placeholder",
    "your-secret-here",
    "<secret>",
];

/// The placeholder `secret` is or contains, if any ([`PLACEHOLDERS`], any case).
pub fn placeholder_in(secret: &[u8]) -> Option<&'static str> {
    let lower = secret.to_ascii_lowercase();
    PLACEHOLDERS.iter().copied().find(|p| {
        lower
            .windows(p.len())
            .any(|w| w == p.to_ascii_lowercase().as_bytes())
    })
}

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

/// The key that tags the frames of one direction after the handshake (see the module doc).
/// Holds the keyed HMAC state, so tagging a frame costs no key schedule.
#[derive(Clone)]
pub struct FrameKey(HmacSha256);

impl std::fmt::Debug for FrameKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FrameKey(..)")
    }
}

impl FrameKey {
    fn from_bytes(key: &[u8; 32]) -> FrameKey {
        FrameKey(<HmacSha256 as Mac>::new_from_slice(key).expect("HMAC takes any key length"))
    }

    fn mac(&self, counter: u64, frame: &[u8]) -> HmacSha256 {
        let mut m = self.0.clone();
        m.update(&counter.to_be_bytes());
        m.update(frame);
        m
    }

    /// The tag of frame number `counter` whose bytes before the tag are `frame` (length field
    /// included).
    pub fn tag(&self, counter: u64, frame: &[u8]) -> [u8; TAG_LEN] {
        let full = self.mac(counter, frame).finalize().into_bytes();
        let mut t = [0u8; TAG_LEN];
        t.copy_from_slice(&full[..TAG_LEN]);
        t
    }

    /// Whether `tag` is the tag of frame number `counter` with bytes `frame`, compared in
    /// constant time.
    pub fn verify(&self, counter: u64, frame: &[u8], tag: &[u8]) -> bool {
        tag.len() == TAG_LEN && self.mac(counter, frame).verify_truncated_left(tag).is_ok()
    }
}

/// The two session keys of one connection.
#[derive(Debug, Clone)]
pub struct SessionKeys {
    /// Tags the copier's frames.
    pub copier_to_intercept: FrameKey,
    /// Tags the intercept's frames.
    pub intercept_to_copier: FrameKey,
}

/// Derive the session keys of a connection from the secret and both Hello nonces.
pub fn session_keys(
    secret: &[u8],
    copier_nonce: &[u8; 32],
    intercept_nonce: &[u8; 32],
) -> SessionKeys {
    let derive = |label| {
        let k: [u8; 32] = mac(secret, label, copier_nonce, intercept_nonce)
            .finalize()
            .into_bytes()
            .into();
        FrameKey::from_bytes(&k)
    };
    SessionKeys {
        copier_to_intercept: derive(C2I_LABEL),
        intercept_to_copier: derive(I2C_LABEL),
    }
}

/// Read the shared secret from `path`: its bytes with trailing `\n`/`\r\n` removed.
///
/// Refused: a file that its group or others may read or write (`mode & 0o077 != 0`; the error
/// gives the `chmod` command), an empty secret, a known placeholder ([`placeholder_in`]), and a
/// secret shorter than [`MIN_SECRET_LEN`]
/// bytes. The mode is read from the opened file, so it is the mode of the bytes read.
pub fn load_secret(path: &Path) -> Result<Vec<u8>, ProtoError> {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let file_err = |source| ProtoError::SecretFile {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(file_err)?;
    let mode = file.metadata().map_err(file_err)?.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(ProtoError::SecretPermissions {
            path: path.to_path_buf(),
            mode,
        });
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(file_err)?;
    while matches!(bytes.last(), Some(b'\n' | b'\r')) {
        bytes.pop();
    }
    if bytes.is_empty() {
        return Err(ProtoError::SecretEmpty(path.to_path_buf()));
    }
    if let Some(placeholder) = placeholder_in(&bytes) {
        return Err(ProtoError::SecretPlaceholder {
            path: path.to_path_buf(),
            placeholder,
        });
    }
    if bytes.len() < MIN_SECRET_LEN {
        return Err(ProtoError::SecretTooShort {
            path: path.to_path_buf(),
            len: bytes.len(),
        });
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

    /// A fresh temp dir for one test.
    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("tcopy-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn write_mode(path: &Path, bytes: &[u8], mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, bytes).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn secret_file_is_trimmed_and_empty_refused() {
        let dir = temp_dir("secret");
        let f = dir.join("s");
        write_mode(&f, b"hunter2-hunter2-hunter2\r\n", 0o600);
        assert_eq!(load_secret(&f).unwrap(), b"hunter2-hunter2-hunter2");
        write_mode(&f, b"\n", 0o600);
        let e = load_secret(&f).unwrap_err();
        assert!(matches!(e, ProtoError::SecretEmpty(_)));
        assert!(e.to_string().contains(&f.display().to_string()), "{e}");
        let missing = dir.join("missing");
        let e = load_secret(&missing).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn short_secret_is_refused_with_its_length() {
        let dir = temp_dir("short-secret");
        let f = dir.join("s");
        write_mode(&f, b"fifteen-bytes!!\n", 0o600);
        let e = load_secret(&f).unwrap_err();
        assert!(
            matches!(e, ProtoError::SecretTooShort { len: 15, .. }),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(text.contains(&f.display().to_string()), "{text}");
        assert!(text.contains("15 bytes") && text.contains("16"), "{text}");
        // Exactly the minimum is enough.
        write_mode(&f, b"sixteen-bytes!!!\n", 0o400);
        assert_eq!(load_secret(&f).unwrap().len(), MIN_SECRET_LEN);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn placeholder_secrets_are_refused_by_name() {
        let dir = temp_dir("placeholder-secret");
        let f = dir.join("s");
        // the value of deploy/k8s/secret.yaml, as a Kubernetes Secret volume gives it
        let manifest = include_str!("../../../deploy/k8s/secret.yaml");
        let value = manifest
            .lines()
            .find_map(|l| l.trim().strip_prefix("secret: "))
            .unwrap()
            .trim_matches('"');
        assert_eq!(value.len(), 38, "{value}");
        for v in [
            value,
            "ChangeMe-ChangeMe-ChangeMe",
            "xxxx-REPLACE-ME-xxxxxxxxxx\n",
        ] {
            write_mode(&f, v.as_bytes(), 0o600);
            let e = load_secret(&f).unwrap_err();
            assert!(
                matches!(e, ProtoError::SecretPlaceholder { .. }),
                "{v}: {e:?}"
            );
            let text = e.to_string();
            assert!(
                text.contains("placeholder")
                    && text.contains(&f.display().to_string())
                    && text.contains("urandom"),
                "{text}"
            );
        }
        // a random one, and the lab's, are fine
        for v in ["q3J0Zk8xR1lqTjV2bEhXc2x0Z0pQbmR3Yz0K", "lab-shared-secret"] {
            write_mode(&f, v.as_bytes(), 0o600);
            assert_eq!(load_secret(&f).unwrap(), v.as_bytes());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn secret_readable_by_others_is_refused_with_the_chmod_command() {
        let dir = temp_dir("open-secret");
        let f = dir.join("s");
        for mode in [0o644, 0o640, 0o604, 0o660, 0o602, 0o610] {
            write_mode(&f, b"a-long-enough-shared-secret\n", mode);
            let e = load_secret(&f).unwrap_err();
            assert!(
                matches!(e, ProtoError::SecretPermissions { .. }),
                "{mode:o}: {e:?}"
            );
            let text = e.to_string();
            assert!(text.contains(&format!("{mode:04o}")), "{text}");
            assert!(
                text.contains(&format!("chmod 600 {}", f.display())),
                "{text}"
            );
        }
        write_mode(&f, b"a-long-enough-shared-secret\n", 0o600);
        load_secret(&f).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn session_keys_differ_per_direction_and_per_connection() {
        let k = session_keys(b"secret", &A, &B);
        let frame = [0, 0, 0, 9, 8, 1, 2, 3, 4, 5, 6, 7, 8];
        let t = k.copier_to_intercept.tag(0, &frame);
        assert!(k.copier_to_intercept.verify(0, &frame, &t));
        // Other direction, other counter, other bytes, other nonces, other secret: all fail.
        assert!(!k.intercept_to_copier.verify(0, &frame, &t));
        assert!(!k.copier_to_intercept.verify(1, &frame, &t));
        let mut other = frame;
        other[12] ^= 1;
        assert!(!k.copier_to_intercept.verify(0, &other, &t));
        assert!(!session_keys(b"secret", &B, &A)
            .copier_to_intercept
            .verify(0, &frame, &t));
        assert!(!session_keys(b"secreT", &A, &B)
            .copier_to_intercept
            .verify(0, &frame, &t));
        // A short or long tag never verifies.
        assert!(!k.copier_to_intercept.verify(0, &frame, &t[..15]));
        let long: Vec<u8> = t.iter().copied().chain([0]).collect();
        assert!(!k.copier_to_intercept.verify(0, &frame, &long));
    }

    #[test]
    fn frame_tag_matches_its_definition() {
        // key_c2i = HMAC(secret, label | copier_nonce | intercept_nonce);
        // tag = HMAC(key_c2i, u64 counter | frame)[..16], computed here with plain HMAC calls.
        let key: [u8; 32] = mac(b"s", C2I_LABEL, &A, &B).finalize().into_bytes().into();
        let mut m = <HmacSha256 as Mac>::new_from_slice(&key).unwrap();
        m.update(&7u64.to_be_bytes());
        m.update(b"frame");
        let want = m.finalize().into_bytes();
        let got = session_keys(b"s", &A, &B)
            .copier_to_intercept
            .tag(7, b"frame");
        assert_eq!(got[..], want[..TAG_LEN]);
    }
}
