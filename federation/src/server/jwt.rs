//! Bearer JWTs from an identity provider: HS256 with a shared secret, RS256 and ES256 with a
//! public key from a PEM file or a JWKS file. Keys are read once at start; nothing is
//! fetched over the network, so a compromised or unreachable IdP endpoint cannot change what
//! this node trusts.
//!
//! The signature, the algorithm (one of the three, and matching the key's kind, so an RSA
//! public key can never be used as an HMAC secret), the issuer and the audience are checked
//! by `jsonwebtoken`; `exp` (required) and `nbf` are checked here against the node's
//! injected clock, so tests run on a pinned clock. The token's subject (`sub`) and groups
//! (a configurable claim, an array of strings or one string) become the [`Principal`];
//! the roles come from the role bindings, as for a token from the token file.

use std::collections::BTreeMap;
use std::path::Path;

use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use tideway_api::auth::Principal;
use tideway_api::clock::SharedClock;

/// Tolerance of `exp` and `nbf` for clock skew between the IdP and this node.
pub const LEEWAY_SECS: i64 = 60;

/// The claim that names the groups when none is configured.
pub const DEFAULT_GROUPS_CLAIM: &str = "groups";

#[derive(Debug, thiserror::Error)]
pub enum JwtError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a usable key: {reason}")]
    BadKey { path: String, reason: String },
    #[error("no JWT key is configured")]
    NoKey,
    #[error("the JWT is malformed: {0}")]
    Malformed(String),
    #[error("the JWT's algorithm {0:?} is not accepted (HS256, RS256, ES256)")]
    Algorithm(Algorithm),
    #[error("no configured key verifies this JWT: {0}")]
    Rejected(String),
    #[error("the JWT expired at {0} (unix seconds)")]
    Expired(i64),
    #[error("the JWT is not valid before {0} (unix seconds)")]
    NotYetValid(i64),
    #[error("the JWT's '{0}' claim is missing or not a string list")]
    Claim(String),
}

/// How tokens are checked, besides their keys.
#[derive(Debug, Clone, Default)]
pub struct JwtSettings {
    /// Required `iss`, when set.
    pub issuer: Option<String>,
    /// Required `aud` (one of), when set.
    pub audience: Option<String>,
    /// The claim holding the groups; [`DEFAULT_GROUPS_CLAIM`] when `None`.
    pub groups_claim: Option<String>,
}

struct Key {
    kid: Option<String>,
    alg: Algorithm,
    key: DecodingKey,
}

/// Verifies JWTs against the configured keys.
pub struct JwtVerifier {
    keys: Vec<Key>,
    settings: JwtSettings,
    clock: SharedClock,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JwtVerifier({} keys)", self.keys.len())
    }
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
    exp: i64,
    #[serde(default)]
    nbf: Option<i64>,
    #[serde(flatten)]
    other: BTreeMap<String, serde_json::Value>,
}

fn read(path: &Path) -> Result<Vec<u8>, JwtError> {
    std::fs::read(path).map_err(|source| JwtError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn bad(path: &Path, reason: impl ToString) -> JwtError {
    JwtError::BadKey {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

impl JwtVerifier {
    pub fn new(settings: JwtSettings, clock: SharedClock) -> Self {
        Self {
            keys: Vec::new(),
            settings,
            clock,
        }
    }

    /// Adds an HS256 secret: the file's bytes, less a trailing newline.
    pub fn with_hs256_secret_file(mut self, path: &Path) -> Result<Self, JwtError> {
        let bytes = read(path)?;
        let secret = bytes.trim_ascii_end();
        if secret.len() < 32 {
            return Err(bad(path, "an HS256 secret needs at least 32 bytes"));
        }
        self.keys.push(Key {
            kid: None,
            alg: Algorithm::HS256,
            key: DecodingKey::from_secret(secret),
        });
        Ok(self)
    }

    /// Adds a public key from a PEM file: RSA (RS256) or P-256 EC (ES256).
    pub fn with_public_key_pem(mut self, path: &Path) -> Result<Self, JwtError> {
        let pem = read(path)?;
        let (alg, key) = match DecodingKey::from_rsa_pem(&pem) {
            Ok(k) => (Algorithm::RS256, k),
            Err(rsa) => match DecodingKey::from_ec_pem(&pem) {
                Ok(k) => (Algorithm::ES256, k),
                Err(ec) => {
                    return Err(bad(
                        path,
                        format!("neither an RSA ({rsa}) nor an EC ({ec}) public key"),
                    ));
                }
            },
        };
        self.keys.push(Key {
            kid: None,
            alg,
            key,
        });
        Ok(self)
    }

    /// Adds every RSA, P-256 EC and symmetric key of a JWKS file, with its `kid`.
    pub fn with_jwks_file(mut self, path: &Path) -> Result<Self, JwtError> {
        let set: JwkSet = serde_json::from_slice(&read(path)?).map_err(|e| bad(path, e))?;
        for (i, jwk) in set.keys.iter().enumerate() {
            let alg = match (&jwk.common.key_algorithm, &jwk.algorithm) {
                (Some(a), _) => a
                    .to_string()
                    .parse::<Algorithm>()
                    .map_err(|e| bad(path, format!("keys[{i}].alg: {e}")))?,
                (None, AlgorithmParameters::RSA(_)) => Algorithm::RS256,
                (None, AlgorithmParameters::EllipticCurve(_)) => Algorithm::ES256,
                (None, AlgorithmParameters::OctetKey(_)) => Algorithm::HS256,
                (None, AlgorithmParameters::OctetKeyPair(_)) => {
                    return Err(bad(path, format!("keys[{i}]: EdDSA is not accepted")));
                }
            };
            if !accepted(alg) {
                return Err(bad(path, format!("keys[{i}].alg: {alg:?} is not accepted")));
            }
            let key =
                DecodingKey::from_jwk(jwk).map_err(|e| bad(path, format!("keys[{i}]: {e}")))?;
            self.keys.push(Key {
                kid: jwk.common.key_id.clone(),
                alg,
                key,
            });
        }
        Ok(self)
    }

    pub fn has_keys(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The principal a valid token names.
    pub fn verify(&self, token: &str) -> Result<Principal, JwtError> {
        if self.keys.is_empty() {
            return Err(JwtError::NoKey);
        }
        let header =
            jsonwebtoken::decode_header(token).map_err(|e| JwtError::Malformed(e.to_string()))?;
        if !accepted(header.alg) {
            return Err(JwtError::Algorithm(header.alg));
        }
        let mut validation = Validation::new(header.alg);
        // exp and nbf on the node's clock, below.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.required_spec_claims = ["exp", "sub"].iter().map(|s| s.to_string()).collect();
        if let Some(iss) = &self.settings.issuer {
            validation.set_issuer(&[iss]);
            validation.required_spec_claims.insert("iss".into());
        }
        match &self.settings.audience {
            Some(aud) => {
                validation.set_audience(&[aud]);
                validation.required_spec_claims.insert("aud".into());
            }
            None => validation.validate_aud = false,
        }
        let candidates = self.keys.iter().filter(|k| {
            k.alg == header.alg
                && match (&header.kid, &k.kid) {
                    (Some(want), Some(have)) => want == have,
                    _ => true,
                }
        });
        let mut last = None;
        let mut claims = None;
        for k in candidates {
            match jsonwebtoken::decode::<Claims>(token, &k.key, &validation) {
                Ok(data) => {
                    claims = Some(data.claims);
                    break;
                }
                Err(e) => last = Some(e.to_string()),
            }
        }
        let claims = claims.ok_or_else(|| {
            JwtError::Rejected(last.unwrap_or_else(|| format!("no {:?} key", header.alg)))
        })?;
        let now = self.clock.now().timestamp();
        if claims.exp + LEEWAY_SECS < now {
            return Err(JwtError::Expired(claims.exp));
        }
        if let Some(nbf) = claims.nbf
            && nbf - LEEWAY_SECS > now
        {
            return Err(JwtError::NotYetValid(nbf));
        }
        let claim = self
            .settings
            .groups_claim
            .as_deref()
            .unwrap_or(DEFAULT_GROUPS_CLAIM);
        let groups = match claims.other.get(claim) {
            None => Vec::new(),
            Some(serde_json::Value::String(g)) => vec![g.clone()],
            Some(serde_json::Value::Array(gs)) => gs
                .iter()
                .map(|g| g.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| JwtError::Claim(claim.to_string()))?,
            Some(_) => return Err(JwtError::Claim(claim.to_string())),
        };
        if claims.sub.trim().is_empty() {
            return Err(JwtError::Claim("sub".into()));
        }
        Ok(Principal {
            subject: claims.sub,
            groups,
        })
    }
}

fn accepted(alg: Algorithm) -> bool {
    matches!(alg, Algorithm::HS256 | Algorithm::RS256 | Algorithm::ES256)
}

/// Whether a bearer token has the shape of a JWT (three dot-separated parts); the token
/// file's tokens never do.
pub fn looks_like_jwt(token: &str) -> bool {
    token.split('.').count() == 3
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::{TimeZone, Utc};
    use jsonwebtoken::{EncodingKey, Header, encode};
    use serde::Serialize;
    use tideway_api::clock::ManualClock;

    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef-hs256";
    const NOW: i64 = 1_800_000_000;

    #[derive(Serialize)]
    struct Out<'a> {
        sub: &'a str,
        iss: &'a str,
        aud: &'a str,
        exp: i64,
        #[serde(skip_serializing_if = "Option::is_none")]
        nbf: Option<i64>,
        roles: Vec<&'a str>,
    }

    fn claims(exp: i64) -> Out<'static> {
        Out {
            sub: "alice",
            iss: "https://idp.example",
            aud: "tideway",
            exp,
            nbf: None,
            roles: vec!["ml", "eval"],
        }
    }

    fn verifier(dir: &Path) -> JwtVerifier {
        let clock: SharedClock = Arc::new(ManualClock::new(
            Utc.timestamp_opt(NOW, 0).single().expect("time"),
        ));
        let secret = dir.join("secret");
        std::fs::write(&secret, SECRET).expect("write");
        JwtVerifier::new(
            JwtSettings {
                issuer: Some("https://idp.example".into()),
                audience: Some("tideway".into()),
                groups_claim: Some("roles".into()),
            },
            clock,
        )
        .with_hs256_secret_file(&secret)
        .expect("secret")
    }

    fn hs(c: &Out) -> String {
        encode(
            &Header::new(Algorithm::HS256),
            c,
            &EncodingKey::from_secret(SECRET),
        )
        .expect("sign")
    }

    #[test]
    fn hs256_maps_subject_and_groups_and_checks_time_issuer_and_audience() {
        let dir = tempfile::tempdir().expect("dir");
        let v = verifier(dir.path());
        let p = v.verify(&hs(&claims(NOW + 600))).expect("valid");
        assert_eq!(p.subject, "alice");
        assert_eq!(p.groups, vec!["ml", "eval"]);

        let expired = v.verify(&hs(&claims(NOW - 3600))).unwrap_err();
        assert!(matches!(expired, JwtError::Expired(_)), "{expired}");
        let within_leeway = v.verify(&hs(&claims(NOW - 30)));
        assert!(within_leeway.is_ok(), "clock skew is tolerated");
        let mut early = claims(NOW + 600);
        early.nbf = Some(NOW + 3600);
        assert!(matches!(
            v.verify(&hs(&early)).unwrap_err(),
            JwtError::NotYetValid(_)
        ));
        let mut other_iss = claims(NOW + 600);
        other_iss.iss = "https://evil.example";
        assert!(matches!(
            v.verify(&hs(&other_iss)).unwrap_err(),
            JwtError::Rejected(_)
        ));
        let mut other_aud = claims(NOW + 600);
        other_aud.aud = "someone-else";
        assert!(v.verify(&hs(&other_aud)).is_err());
        let forged = encode(
            &Header::new(Algorithm::HS256),
            &claims(NOW + 600),
            &EncodingKey::from_secret(b"another secret of enough length!!"),
        )
        .expect("sign");
        assert!(matches!(
            v.verify(&forged).unwrap_err(),
            JwtError::Rejected(_)
        ));
        let hs512 = encode(
            &Header::new(Algorithm::HS512),
            &claims(NOW + 600),
            &EncodingKey::from_secret(SECRET),
        )
        .expect("sign");
        assert!(matches!(
            v.verify(&hs512).unwrap_err(),
            JwtError::Algorithm(Algorithm::HS512)
        ));
        assert!(v.verify("not.a.jwt").is_err());
    }

    #[test]
    fn rs256_from_a_checked_in_test_key() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata");
        let clock: SharedClock = Arc::new(ManualClock::new(
            Utc.timestamp_opt(NOW, 0).single().expect("time"),
        ));
        let v = JwtVerifier::new(JwtSettings::default(), clock)
            .with_public_key_pem(&Path::new(dir).join("jwt-rs256-public.pem"))
            .expect("pem");
        let private = std::fs::read(Path::new(dir).join("jwt-rs256-private.pem")).expect("key");
        let key = EncodingKey::from_rsa_pem(&private).expect("private key");
        let token = encode(&Header::new(Algorithm::RS256), &claims(NOW + 60), &key).expect("sign");
        let p = v.verify(&token).expect("valid");
        assert_eq!((p.subject.as_str(), p.groups.len()), ("alice", 0), "{p:?}");
        let token = encode(&Header::new(Algorithm::RS256), &claims(NOW - 600), &key).expect("sign");
        assert!(matches!(
            v.verify(&token).unwrap_err(),
            JwtError::Expired(_)
        ));
    }

    #[test]
    fn es256_from_a_pem_and_a_jwks_with_kid() {
        use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("keygen");
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .expect("pair");
        let point = pair.public_key().as_ref();
        // SubjectPublicKeyInfo of a P-256 key: fixed prefix, then the uncompressed point.
        let mut spki = vec![
            0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06,
            0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
        ];
        spki.extend_from_slice(point);
        let b64 = |b: &[u8]| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.encode(b)
        };
        let pem = format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
            b64(&spki)
        );
        let dir = tempfile::tempdir().expect("dir");
        let pem_path = dir.path().join("idp.pem");
        std::fs::write(&pem_path, pem).expect("write");
        let clock: SharedClock = Arc::new(ManualClock::new(
            Utc.timestamp_opt(NOW, 0).single().expect("time"),
        ));
        let settings = JwtSettings {
            issuer: Some("https://idp.example".into()),
            audience: None,
            groups_claim: Some("roles".into()),
        };
        let v = JwtVerifier::new(settings.clone(), clock.clone())
            .with_public_key_pem(&pem_path)
            .expect("pem");
        let key = EncodingKey::from_ec_der(pkcs8.as_ref());
        let token = encode(&Header::new(Algorithm::ES256), &claims(NOW + 60), &key).expect("sign");
        assert_eq!(v.verify(&token).expect("valid").subject, "alice");
        // An HS256 token "signed" with the public key's bytes is refused: the key is EC.
        let confused = encode(
            &Header::new(Algorithm::HS256),
            &claims(NOW + 60),
            &EncodingKey::from_secret(&spki),
        )
        .expect("sign");
        assert!(v.verify(&confused).is_err());

        // The same key in a JWKS, found by its kid.
        let b64url = |b: &[u8]| {
            use base64::Engine;
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
        };
        let jwks = format!(
            r#"{{"keys":[{{"kty":"EC","crv":"P-256","kid":"k1","alg":"ES256","x":"{}","y":"{}"}}]}}"#,
            b64url(&point[1..33]),
            b64url(&point[33..65])
        );
        let jwks_path = dir.path().join("jwks.json");
        std::fs::write(&jwks_path, jwks).expect("write");
        let v = JwtVerifier::new(settings, clock)
            .with_jwks_file(&jwks_path)
            .expect("jwks");
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some("k1".into());
        let token = encode(&header, &claims(NOW + 60), &key).expect("sign");
        assert_eq!(v.verify(&token).expect("valid").groups, vec!["ml", "eval"]);
        header.kid = Some("k2".into());
        let token = encode(&header, &claims(NOW + 60), &key).expect("sign");
        assert!(v.verify(&token).is_err(), "an unknown kid matches no key");
    }
}
