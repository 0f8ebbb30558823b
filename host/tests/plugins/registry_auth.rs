//! Plugins from registries that ask who is pulling, the CNCF distribution registry on
//! loopback: with an htpasswd file (user names and passwords), and with token auth and a token
//! server written for the test (user names and passwords exchanged for tokens, identity tokens
//! exchanged and renewed, registry tokens), and over TLS with a CA made by the test, trusted for
//! that registry alone; each refusal names the registry, the credential's or CA's source and
//! what to fix, and is never followed by an anonymous try.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use crate::{registry, token_server};

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use nad_plugin_fetcher::{Credentials, GivenIn, PUSH_LAYER_MEDIA_TYPE, Puller, RegistryCas};
use registry::{Registry, Scratch, TestCa, cli, oci, puller, push};
use token_server::TokenServer;

const OPT_OUT: &[u8] = include_bytes!(env!("NSC_EXAMPLE_OPT_OUT_WASM"));

/// A Docker config file `name` in `dir` with one entry, for `registry`.
fn config_file(dir: &Path, name: &str, registry: &str, entry: serde_json::Value) -> PathBuf {
    let path = dir.join(format!("{name}.json"));
    let config = serde_json::json!({"auths": {registry: entry}});
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

/// A Docker config file in `dir` with `user:password` for `registry`, as `docker login` writes.
fn docker_config(dir: &Path, registry: &str, user: &str, password: &str) -> PathBuf {
    use base64::Engine as _;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let name = format!("config-{}-{user}-{password}", registry.replace(':', "_"));
    config_file(dir, &name, registry, serde_json::json!({ "auth": auth }))
}

fn credentials(path: &Path) -> Credentials {
    Credentials::parse(&path.display().to_string(), &std::fs::read(path).unwrap()).unwrap()
}

/// A registry that serves only `ci:s3cret`, with a Docker config file of that user's right
/// password and one of a wrong password.
struct Private {
    registry: Registry,
    files: Scratch,
    good: PathBuf,
    wrong: PathBuf,
}

impl Private {
    fn start(test: &str) -> Self {
        let registry = Registry::start_with(test, &[("ci", "s3cret")]);
        let files = Scratch::new(&format!("{test}-files"));
        let good = docker_config(&files.0, &registry.host, "ci", "s3cret");
        let wrong = docker_config(&files.0, &registry.host, "ci", "guess");
        Private {
            registry,
            files,
            good,
            wrong,
        }
    }
}

#[tokio::test]
async fn a_registry_that_asks_for_a_password_serves_the_docker_configs_user_and_refuses_the_rest() {
    let Private {
        registry,
        files,
        good,
        wrong,
    } = Private::start("htpasswd");
    let with = |config: Option<&Path>| {
        let puller = puller(&registry, None);
        puller.set_credentials(config.map(credentials)).unwrap();
        puller
    };

    let authorised = with(Some(&good));
    let reference = registry.reference("private/opt-out:1");
    let digest = push(&authorised, &reference, OPT_OUT, PUSH_LAYER_MEDIA_TYPE).await;
    let pinned = oci(&format!(
        "{}@{digest}",
        registry.reference("private/opt-out")
    ));
    let pulled = authorised.pull(&pinned).await.unwrap();
    assert_eq!(pulled.component, OPT_OUT);

    let anonymous = with(None).pull(&pinned).await.unwrap_err().to_string();
    assert!(
        anonymous.contains(&format!(
            "the registry {} refused anonymous access to private/opt-out: give a credential for {} (--registry-config)",
            registry.host, registry.host
        )),
        "{anonymous}"
    );
    let refused = with(Some(&wrong))
        .pull(&pinned)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains(&format!(
            "the registry {} refused the user name and password from {} for private/opt-out",
            registry.host,
            wrong.display()
        )),
        "{refused}"
    );
    let push_refused = with(Some(&wrong))
        .push(
            &oci(&reference),
            OPT_OUT,
            PUSH_LAYER_MEDIA_TYPE,
            BTreeMap::new(),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        push_refused.contains("refused the user name and password"),
        "{push_refused}"
    );

    // Credentials for another registry change nothing here: anonymous, and refused as such.
    let elsewhere = docker_config(&files.0, "registry.example", "ci", "s3cret");
    let other = with(Some(&elsewhere))
        .pull(&pinned)
        .await
        .unwrap_err()
        .to_string();
    assert!(other.contains("refused anonymous access"), "{other}");
}

#[tokio::test]
async fn the_plugin_commands_speak_to_a_registry_with_the_docker_config_they_are_given() {
    let Private {
        registry,
        files,
        good,
        wrong,
    } = Private::start("htpasswd-cli");
    let authorised = puller(&registry, None);
    authorised
        .set_credentials(Some(credentials(&good)))
        .unwrap();
    let digest = push(
        &authorised,
        &registry.reference("private/opt-out:1"),
        OPT_OUT,
        PUSH_LAYER_MEDIA_TYPE,
    )
    .await;
    let pinned = format!("{}@{digest}", registry.reference("private/opt-out"));
    let cache = Scratch::new("htpasswd-cli-cache");
    let flags = |config: &Path| {
        vec![
            "--plugin-registry-http".to_owned(),
            registry.host.clone(),
            "--plugin-cache-dir".to_owned(),
            cache.0.display().to_string(),
            "--registry-config".to_owned(),
            config.display().to_string(),
        ]
    };
    let inspect = |config: &Path| {
        let mut args = vec!["plugin".to_owned(), "inspect".to_owned(), pinned.clone()];
        args.extend(flags(config));
        cli(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let (ok, _, err) = inspect(&wrong);
    assert!(
        !ok && err.contains("refused the user name and password"),
        "{err}"
    );
    let (ok, out, err) = inspect(&good);
    assert!(ok && out.contains("opt-out"), "{err}");
    let file = files.0.join("opt-out.wasm");
    std::fs::write(&file, OPT_OUT).unwrap();
    let mut args = vec![
        "plugin".to_owned(),
        "push".to_owned(),
        file.display().to_string(),
        registry.reference("private/pushed:1"),
    ];
    args.extend(flags(&good));
    let (ok, out, err) = cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(ok, "{err}");
    assert!(
        out.trim()
            .starts_with(&registry.reference("private/pushed@sha256:")),
        "{out}"
    );
    let unreadable = files.0.join("not-json.json");
    std::fs::write(&unreadable, "{").unwrap();
    let (ok, _, err) = inspect(&unreadable);
    assert!(!ok && err.contains("not a Docker config"), "{err}");
}

/// A registry with token auth, its token server (user `ci:s3cret`, refresh token `refresh-ci`
/// for `ci`; tokens that live 3 s), and a puller for it with `config`.
struct Tokens {
    server: TokenServer,
    registry: Registry,
    files: Scratch,
}

impl Tokens {
    fn start(test: &str) -> Self {
        let server = TokenServer::start(
            &[("ci", "s3cret")],
            &[("refresh-ci", "ci")],
            Duration::from_secs(3),
        );
        let registry = Registry::start_token(
            test,
            &server.realm,
            token_server::SERVICE,
            token_server::ISSUER,
            &server.jwks(),
        );
        let files = Scratch::new(&format!("{test}-files"));
        Tokens {
            server,
            registry,
            files,
        }
    }

    /// A puller with the one-entry Docker config `name` for this registry.
    fn puller(&self, name: &str, entry: serde_json::Value) -> (Puller, PathBuf) {
        let path = config_file(&self.files.0, name, &self.registry.host, entry);
        let puller = puller(&self.registry, None);
        puller.set_credentials(Some(credentials(&path))).unwrap();
        (puller, path)
    }
}

fn epoch_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test]
async fn an_identity_token_is_exchanged_at_the_token_server_and_renewed_before_it_expires() {
    let tokens = Tokens::start("identity-token");
    let host = &tokens.registry.host;
    let (identity, _) = tokens.puller(
        "identity",
        serde_json::json!({"identitytoken": "refresh-ci"}),
    );

    // Pushing asks for a token to push, then one to pull what was pushed.
    let reference = tokens.registry.reference("team/opt-out:1");
    let digest = push(&identity, &reference, OPT_OUT, PUSH_LAYER_MEDIA_TYPE).await;
    assert_eq!(
        tokens.server.exchanges(),
        1,
        "one exchange for the push scope"
    );
    let pinned = oci(&format!(
        "{}@{digest}",
        tokens.registry.reference("team/opt-out")
    ));
    assert_eq!(identity.pull(&pinned).await.unwrap().component, OPT_OUT);
    assert_eq!(tokens.server.exchanges(), 2, "another for the pull scope");
    assert_eq!(identity.pull(&pinned).await.unwrap().component, OPT_OUT);
    assert_eq!(
        tokens.server.exchanges(),
        2,
        "a fresh access token is used again"
    );

    // The tokens live 3 s and are renewed a quarter of that before they lapse.
    tokio::time::sleep(Duration::from_millis(2_400)).await;
    assert_eq!(identity.pull(&pinned).await.unwrap().component, OPT_OUT);
    assert_eq!(tokens.server.exchanges(), 3, "renewed before it expired");

    // A refresh token the server does not know: refused by the token server, said so.
    let (unknown, path) = tokens.puller("unknown", serde_json::json!({"identitytoken": "stolen"}));
    let refused = unknown.pull(&pinned).await.unwrap_err().to_string();
    assert!(
        refused.contains(&format!(
            "the token server {} of the registry {host} refused the identity token from {} \
             (HTTP 400: invalid_grant: unknown refresh token): give a fresh identity token for \
             {host}",
            tokens.server.realm,
            path.display()
        )),
        "{refused}"
    );
    assert_eq!(tokens.server.exchanges(), 3);
}

#[tokio::test]
async fn passwords_and_registry_tokens_reach_a_token_registry_and_an_expired_token_is_named() {
    let tokens = Tokens::start("registry-token");
    let host = &tokens.registry.host;
    let (password, _) = tokens.puller(
        "password",
        serde_json::json!({"username": "ci", "password": "s3cret"}),
    );
    let reference = tokens.registry.reference("team/opt-out:1");
    let digest = push(&password, &reference, OPT_OUT, PUSH_LAYER_MEDIA_TYPE).await;
    let pinned = oci(&format!(
        "{}@{digest}",
        tokens.registry.reference("team/opt-out")
    ));
    assert_eq!(password.pull(&pinned).await.unwrap().component, OPT_OUT);

    let fresh = tokens
        .server
        .registry_token("ci", "team/opt-out", epoch_seconds() + 300);
    let (bearer, _) = tokens.puller("fresh", serde_json::json!({ "registrytoken": fresh }));
    assert_eq!(bearer.pull(&pinned).await.unwrap().component, OPT_OUT);

    // Expired ten minutes ago: past the registry's minute of leeway.
    let stale = tokens
        .server
        .registry_token("ci", "team/opt-out", epoch_seconds() - 600);
    let (expired, path) = tokens.puller("stale", serde_json::json!({ "registrytoken": stale }));
    let refused = expired.pull(&pinned).await.unwrap_err().to_string();
    let expected = format!(
        "the registry {host} refused the registry token from {} for team/opt-out: it expired at ",
        path.display()
    );
    assert!(
        refused.contains(&expected) && refused.ends_with("; give a fresh one"),
        "{refused}"
    );

    // A token for another repository is no key to this one.
    let other = tokens
        .server
        .registry_token("ci", "team/other", epoch_seconds() + 300);
    let (elsewhere, _) = tokens.puller("other", serde_json::json!({ "registrytoken": other }));
    let refused = elsewhere.pull(&pinned).await.unwrap_err().to_string();
    assert!(refused.contains("check that credential"), "{refused}");

    let (wrong, path) = tokens.puller(
        "wrong",
        serde_json::json!({"username": "ci", "password": "guess"}),
    );
    let refused = wrong.pull(&pinned).await.unwrap_err().to_string();
    assert!(
        refused.contains(&format!(
            "the registry {host} refused the user name and password from {} for team/opt-out",
            path.display()
        )),
        "{refused}"
    );
    let anonymous = puller(&tokens.registry, None)
        .pull(&pinned)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        anonymous.contains("refused anonymous access"),
        "{anonymous}"
    );
    assert_eq!(tokens.server.exchanges(), 0, "no identity token was given");
}

#[tokio::test]
async fn a_registry_behind_tls_is_trusted_with_its_ca_and_for_it_alone() {
    let ca = TestCa::new("nsc test CA");
    let registry = Registry::start_tls("tls", &[("ci", "s3cret")], &ca);
    let host = &registry.host;
    let files = Scratch::new("tls-files");
    let config = docker_config(&files.0, host, "ci", "s3cret");
    let (ca_file, other_file) = (files.0.join("ca.pem"), files.0.join("other-ca.pem"));
    std::fs::write(&ca_file, &ca.pem).unwrap();
    std::fs::write(&other_file, TestCa::new("another CA").pem).unwrap();
    // A puller with the password, trusting the CA files given per registry.
    let with = |trusted: &[(&str, &Path)]| {
        let puller = puller(&registry, None);
        puller.set_credentials(Some(credentials(&config))).unwrap();
        let mut cas = RegistryCas::new(GivenIn::Flag);
        for (registry, file) in trusted {
            let source = file.display().to_string();
            cas.add_pem(registry, &source, &std::fs::read(file).unwrap())
                .unwrap();
        }
        puller.set_cas(cas).unwrap();
        puller
    };

    let trusting = with(&[(host, &ca_file)]);
    let reference = registry.reference("team/opt-out:1");
    let digest = push(&trusting, &reference, OPT_OUT, PUSH_LAYER_MEDIA_TYPE).await;
    let pinned = oci(&format!("{}@{digest}", registry.reference("team/opt-out")));
    assert_eq!(trusting.pull(&pinned).await.unwrap().component, OPT_OUT);

    let untrusted = with(&[]).pull(&pinned).await.unwrap_err().to_string();
    assert!(
        untrusted.contains(&format!(
            "the registry {host} was refused over TLS (invalid peer certificate: UnknownIssuer): \
             it is not signed by a CA this host trusts: give the CA that signed it \
             (--registry-ca {host}=<PEM file>)"
        )),
        "{untrusted}"
    );
    // The CA is trusted for the registry it is given for, and no other.
    let elsewhere = with(&[("registry.example", &ca_file)]);
    let refused = elsewhere.pull(&pinned).await.unwrap_err().to_string();
    assert!(
        refused.contains("not signed by a CA this host trusts"),
        "{refused}"
    );
    let wrong = with(&[(host, &other_file)]).pull(&pinned).await;
    let wrong = wrong.unwrap_err().to_string();
    assert!(
        wrong.contains(&format!(
            "it is not signed by the CA from {}: give the CA that signed it",
            other_file.display()
        )),
        "{wrong}"
    );

    // The plugin commands take the CA file (each run with a cache of its own: nothing is
    // read from an earlier run's).
    let inspect = |run: &str, extra: &[String]| {
        let pinned = pinned.to_string();
        let config = config.display().to_string();
        let cache = files.0.join(run).display().to_string();
        let mut args = vec!["plugin", "inspect", &pinned, "--registry-config", &config];
        args.extend(["--plugin-cache-dir", &cache]);
        args.extend(extra.iter().map(String::as_str));
        cli(&args)
    };
    let (ok, _, err) = inspect("untrusted", &[]);
    assert!(
        !ok && err.contains(&format!("(--registry-ca {host}=<PEM file>)")),
        "{err}"
    );
    let trust = format!("--registry-ca={host}={}", ca_file.display());
    let (ok, out, err) = inspect("trusted", &[trust]);
    assert!(ok && out.contains("opt-out"), "{err}");
}
