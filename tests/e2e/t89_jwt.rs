//! JWT authentication with real processes and the CLI: a server configured with an HS256
//! secret, an issuer and an audience accepts a token from the "identity provider" (signed
//! here), maps its subject and groups claim, and takes the roles from a RoleBinding on the
//! group; an expired token, a token for another audience and a forged one are 401 and write
//! nothing.

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde::Serialize;
use tideway_api::client::{Client, ListQuery};

use crate::common::*;

const ADMIN: &str = "tw_admin_t89_token";
const SECRET: &str = "t89-shared-secret-of-at-least-32-bytes";

#[derive(Serialize)]
struct Claims<'a> {
    sub: &'a str,
    iss: &'a str,
    aud: &'a str,
    exp: u64,
    groups: Vec<&'a str>,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn token(sub: &str, aud: &str, exp: u64, secret: &str) -> String {
    encode(
        &Header::new(Algorithm::HS256),
        &Claims {
            sub,
            iss: "https://idp.t89.example",
            aud,
            exp,
            groups: vec!["ml-team"],
        },
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwts_from_the_configured_issuer_authenticate_and_bindings_authorize() {
    let files = tempfile::tempdir().unwrap();
    let tokens = files.path().join("tokens.yaml");
    std::fs::write(
        &tokens,
        format!(
            "tokens:\n- {{subject: admin, groups: [system:admins], sha256: {}}}\n",
            tideway_federation::server::auth::hash_token(ADMIN)
        ),
    )
    .unwrap();
    let secret = files.path().join("jwt.secret");
    std::fs::write(&secret, format!("{SECRET}\n")).unwrap();
    let tc = cluster_with_token(
        1,
        &[
            "--auth-tokens",
            tokens.to_str().unwrap(),
            "--jwt-hs256-secret-file",
            secret.to_str().unwrap(),
            "--jwt-issuer",
            "https://idp.t89.example",
            "--jwt-audience",
            "tideway",
        ],
        ADMIN,
    )
    .await;
    let addr = tc.c.addrs()[0].clone();
    let admin = Client::with_token(&addr, Some(ADMIN)).unwrap();
    let binding = files.path().join("binding.yaml");
    std::fs::write(
        &binding,
        "apiVersion: tideway.dev/v1alpha1\nkind: RoleBinding\nmetadata: {name: ml}\nspec: {role: submitter, groups: [ml-team], queues: [default]}\n",
    )
    .unwrap();
    let (ok, out, err) = tideway(
        &addr,
        &["apply", "-f", binding.to_str().unwrap(), "--token", ADMIN],
    );
    assert!(ok, "{out}{err}");

    // The CLI with a JWT in TIDEWAY_TOKEN submits as the token's subject.
    let jwt = token("dana@example.com", "tideway", now() + 600, SECRET);
    let manifest = files.path().join("w.json");
    std::fs::write(&manifest, workload_json("by-jwt")).unwrap();
    let out = std::process::Command::new(BIN)
        .args(["submit", "-f", manifest.to_str().unwrap()])
        .env("TIDEWAY_ADDR", &addr)
        .env("TIDEWAY_CONFIG", files.path().join("no-config"))
        .env("TIDEWAY_TOKEN", &jwt)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    let w = admin.get("by-jwt", false).await.unwrap();
    assert_eq!(w.spec.user.as_deref(), Some("dana@example.com"));
    let dana = Client::with_token(&addr, Some(&jwt)).unwrap();
    assert_eq!(
        dana.list(&ListQuery::default()).await.unwrap().items.len(),
        1
    );

    // Expired, wrong audience, forged: 401, nothing written.
    let before = admin.cluster_status().await.unwrap().last_applied;
    for (why, bad) in [
        (
            "expired",
            token("dana@example.com", "tideway", now() - 3600, SECRET),
        ),
        (
            "audience",
            token("dana@example.com", "other", now() + 600, SECRET),
        ),
        (
            "forged",
            token(
                "dana@example.com",
                "tideway",
                now() + 600,
                "a-different-secret-of-32-bytes-or-more",
            ),
        ),
    ] {
        let c = Client::with_token(&addr, Some(&bad)).unwrap();
        let e = c
            .submit_raw(
                workload_json(&format!("bad-{why}")).into_bytes(),
                false,
                None,
            )
            .await
            .unwrap_err();
        assert!(e.to_string().contains("401"), "{why}: {e}");
    }
    assert_eq!(
        admin.cluster_status().await.unwrap().last_applied,
        before,
        "a refused JWT wrote"
    );
    drop(tc);
}
