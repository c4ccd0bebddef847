//! `q-a2a-gateway preflight`: what this gateway can see of its rollout requirements, as a
//! pass/fail table with the fix for each failure. Nothing is changed.
//!
//! Checks: PostgreSQL reachable and every migration applied, Redis reachable, Q reachable with
//! a compatible contract and accepting the service token, the outbound credential keys present
//! and well-formed, timeouts consistent with the 110 s observation window, the reconciler
//! configured, and TLS files usable when configured.

use std::time::Duration;

use crate::card_signature::CardSigner;
use crate::config::Config;
use crate::health::{self, Check};
use crate::lease::ObserverLeases;
use crate::outbound::credential::CredentialKeys;
use crate::store::migrate::{self, MIGRATIONS};
use crate::store::PgTaskStore;
use crate::upstream::UpstreamRunApi;

/// The profile's HTTP observation window: no configuration may exceed it.
pub const PROFILE_WINDOW_SECONDS: u64 = 110;

mod seals;

#[derive(Debug, Clone)]
pub struct Line {
    pub name: &'static str,
    pub check: Check,
    /// What to do when the check fails.
    pub fix: &'static str,
    /// A failure is a warning: shown with its fix, but preflight still passes.
    pub advisory: bool,
}

#[derive(Debug, Clone)]
pub struct Preflight {
    pub lines: Vec<Line>,
}

impl Preflight {
    pub fn passed(&self) -> bool {
        self.lines.iter().all(|l| l.check.ok || l.advisory)
    }

    /// The table printed by the command.
    pub fn render(&self) -> String {
        let width = self
            .lines
            .iter()
            .map(|l| l.name.len())
            .max()
            .unwrap_or(5)
            .max(5);
        let mut out = format!("{:width$}  RESULT  DETAIL\n", "CHECK");
        for line in &self.lines {
            let result = match (line.check.ok, line.advisory) {
                (true, _) => "pass",
                (false, true) => "warn",
                (false, false) => "FAIL",
            };
            out.push_str(&format!(
                "{:width$}  {result:6}  {}\n",
                line.name, line.check.detail
            ));
            if !line.check.ok {
                out.push_str(&format!("{:width$}          fix: {}\n", "", line.fix));
            }
        }
        let failed = self
            .lines
            .iter()
            .filter(|l| !l.check.ok && !l.advisory)
            .count();
        let warned = self
            .lines
            .iter()
            .filter(|l| !l.check.ok && l.advisory)
            .count();
        if failed == 0 && warned > 0 {
            out.push_str(&format!(
                "preflight: passed, with {warned} warning(s) of {} checks\n",
                self.lines.len()
            ));
        } else if failed == 0 {
            out.push_str(&format!(
                "preflight: all {} checks passed\n",
                self.lines.len()
            ));
        } else {
            out.push_str(&format!(
                "preflight: {failed} of {} checks failed\n",
                self.lines.len()
            ));
        }
        out
    }
}

/// Runs every check against the loaded configuration.
pub async fn run(config: &Config) -> anyhow::Result<Preflight> {
    let store = PgTaskStore::connect(&config.database)?;
    let redis = ObserverLeases::new(&config.redis, config.observers.clone())?;
    let upstream = UpstreamRunApi::new(&config.upstream)?;
    let (database, migrations, redis, contract, token, (seals, seals_fatal)) = tokio::join!(
        // Writable now: a deployment check allows no grace.
        health::check_database(&store, Duration::ZERO),
        check_migrations(&store),
        health::check_redis(&redis, Duration::ZERO),
        health::check_upstream(&upstream),
        check_service_token(config, &upstream),
        seals::check(config, &store),
    );
    let lines = vec![
        Line {
            name: "database",
            check: database,
            fix: "check database.url (Q_A2A_DATABASE_URL) names the primary (or lists it among its hosts) and that PostgreSQL accepts this replica's connections",
            advisory: false,
        },
        Line {
            name: "migrations",
            check: migrations,
            fix: "run `q-a2a-gateway migrate` (the Helm chart's pre-install/pre-upgrade Job runs it)",
            advisory: false,
        },
        Line {
            name: "redis",
            check: redis,
            fix: "check redis.url (Q_A2A_REDIS_URL) names the primary (not a replica) and that Redis accepts this replica's connections",
            advisory: false,
        },
        Line {
            name: "q_contract",
            check: contract,
            fix: "check upstream.url (Q_A2A_UPSTREAM_URL) points at Q's internal API serving contract version 1",
            advisory: false,
        },
        Line {
            name: "q_service_token",
            check: token,
            fix: "set Q_A2A_UPSTREAM_SERVICE_TOKEN to the gateway's service credential issued by Q",
            advisory: false,
        },
        Line {
            name: "credential_keys",
            check: check_credential_keys(config),
            fix: "set Q_A2A_CREDENTIAL_KEYS to id:base64(32 random bytes)[,id:...], current key first (e.g. k1:$(openssl rand -base64 32))",
            advisory: false,
        },
        Line {
            name: "credential_seals",
            check: seals,
            fix: seals::FIX,
            advisory: !seals_fatal,
        },
        Line {
            name: "card_signing",
            check: check_card_signing(config),
            fix: "give card_signing.keys_dir (Q_A2A_CARD_SIGNING_KEYS_DIR) one <kid>.pem (PKCS#8) or <kid>.jwk file per ES256/EdDSA key and name the signing one in Q_A2A_CARD_SIGNING_ACTIVE_KEY, or unset the directory to serve cards unsigned",
            advisory: false,
        },
        Line {
            name: "timeouts",
            check: check_timeouts(config),
            fix: "keep limits.observation_window_seconds <= 110, upstream.request_timeout_ms below the window, and the proxy read timeout (proxy_read_timeout_seconds, set to the deployed value) above it",
            advisory: false,
        },
        Line {
            name: "reconciler",
            check: check_reconciler(config),
            fix: "set reconciler.enabled = true (Q_A2A_RECONCILER_ENABLED) with reconciler.interval_ms between 100 and 60000",
            advisory: false,
        },
        Line {
            name: "tls",
            check: check_tls(config),
            fix: "point tls.cert_file / tls.key_file (Q_A2A_TLS_CERT_FILE / Q_A2A_TLS_KEY_FILE) at a readable PEM chain and its private key",
            advisory: false,
        },
    ];
    Ok(Preflight { lines })
}

async fn check_migrations(store: &PgTaskStore) -> Check {
    let result = tokio::time::timeout(health::CHECK_TIMEOUT * 3, async {
        let client = store.pool().get().await.map_err(|e| e.to_string())?;
        let mut missing = Vec::new();
        for (version, _) in MIGRATIONS {
            if !migrate::is_applied(&client, version)
                .await
                .map_err(|e| e.to_string())?
            {
                missing.push(*version);
            }
        }
        Ok::<_, String>(missing)
    })
    .await;
    match result {
        Ok(Ok(missing)) if missing.is_empty() => Check {
            ok: true,
            detail: format!("all {} applied", MIGRATIONS.len()),
        },
        Ok(Ok(missing)) => Check {
            ok: false,
            detail: format!("not applied: {}", missing.join(", ")),
        },
        Ok(Err(e)) => Check {
            ok: false,
            detail: format!("cannot read migrations: {e}"),
        },
        Err(_) => Check {
            ok: false,
            detail: "cannot read migrations: no answer in time".into(),
        },
    }
}

/// Introspects a token that cannot exist: Q answers (inactive) only if it accepts the
/// gateway's service credential.
async fn check_service_token(config: &Config, upstream: &UpstreamRunApi) -> Check {
    if config.upstream.service_token.is_empty() {
        return Check {
            ok: false,
            detail: "no service token configured".into(),
        };
    }
    let probe = tokio::time::timeout(
        health::CHECK_TIMEOUT,
        upstream.introspect("q-a2a-gateway-preflight-probe"),
    )
    .await;
    match probe {
        Ok(Ok(_)) => Check {
            ok: true,
            detail: "Q accepts the service token".into(),
        },
        Ok(Err(e)) if e.kind() == "refused" => Check {
            ok: false,
            detail: format!("Q refuses the service token: {e}"),
        },
        Ok(Err(e)) => Check {
            ok: false,
            detail: format!("cannot verify the service token: {e}"),
        },
        Err(_) => Check {
            ok: false,
            detail: "cannot verify the service token: no answer in time".into(),
        },
    }
}

/// Outbound credential keys configured and usable (`outbound.credential_keys`, parsed by the
/// same code that seals credentials). Key material is never echoed.
pub fn check_credential_keys(config: &Config) -> Check {
    let keys = &config.outbound;
    if keys.credential_keys.expose().trim().is_empty() {
        return Check {
            ok: false,
            detail: "Q_A2A_CREDENTIAL_KEYS is not set".into(),
        };
    }
    match CredentialKeys::parse(keys.credential_keys.expose(), &keys.credential_active_key) {
        Ok(parsed) => Check {
            ok: true,
            detail: format!(
                "{} key(s), active {:?}",
                parsed.len(),
                parsed.active_key_id().unwrap_or_default()
            ),
        },
        Err(e) => Check {
            ok: false,
            detail: format!("credential keys: {e}"),
        },
    }
}

/// The card signing keys load (by the code that signs with them) and name the active one, or
/// signing is off. Key material is never echoed.
pub fn check_card_signing(config: &Config) -> Check {
    match CardSigner::from_config(&config.card_signing) {
        Ok(signer) => Check {
            ok: true,
            detail: match signer.keys() {
                Some(keys) => format!(
                    "{} key(s), active {:?} ({})",
                    keys.kids().len(),
                    keys.active().kid(),
                    keys.active().algorithm().jws_name()
                ),
                None => "off: cards are served unsigned".into(),
            },
        },
        Err(e) => Check {
            ok: false,
            detail: format!("card signing keys: {e}"),
        },
    }
}

pub fn check_timeouts(config: &Config) -> Check {
    let window = config.limits.observation_window_seconds;
    let upstream = Duration::from_millis(config.upstream.request_timeout_ms);
    let proxy = config.proxy_read_timeout_seconds;
    let mut problems = Vec::new();
    if window > PROFILE_WINDOW_SECONDS {
        problems.push(format!(
            "observation window {window}s exceeds the profile's {PROFILE_WINDOW_SECONDS}s"
        ));
    }
    if upstream >= Duration::from_secs(window) {
        problems.push(format!(
            "upstream request timeout {upstream:?} is not below the {window}s window"
        ));
    }
    if proxy <= window {
        problems.push(format!(
            "proxy read timeout {proxy}s does not exceed the {window}s window"
        ));
    }
    if problems.is_empty() {
        Check {
            ok: true,
            detail: format!("window {window}s, upstream request {upstream:?}, proxy read {proxy}s"),
        }
    } else {
        Check {
            ok: false,
            detail: problems.join("; "),
        }
    }
}

pub fn check_reconciler(config: &Config) -> Check {
    let r = &config.reconciler;
    if !r.enabled {
        return Check {
            ok: false,
            detail: "reconciler.enabled is false: pending/unknown dispatches would wait for a client repeat".into(),
        };
    }
    if !(100..=60_000).contains(&r.interval_ms) {
        return Check {
            ok: false,
            detail: format!(
                "reconciler.interval_ms {} is outside 100..=60000",
                r.interval_ms
            ),
        };
    }
    Check {
        ok: true,
        detail: format!("enabled, every {} ms", r.interval_ms),
    }
}

fn check_tls(config: &Config) -> Check {
    match crate::tls::acceptor(&config.tls) {
        Ok(Some(_)) => Check {
            ok: true,
            detail: "certificate and key load".into(),
        },
        Ok(None) => Check {
            ok: true,
            detail: "not configured: TLS terminates at the proxy".into(),
        },
        Err(e) => Check {
            ok: false,
            detail: format!("{e:#}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="; // 32 bytes

    #[test]
    fn credential_keys_must_be_set_and_never_echoed() {
        let mut c = Config::default();
        let missing = check_credential_keys(&c);
        assert!(!missing.ok && missing.detail.contains(crate::config::env::CREDENTIAL_KEYS));
        c.outbound.credential_keys = format!("k2:{KEY},k1:{KEY}").into();
        c.outbound.credential_active_key = "k2".into();
        let ok = check_credential_keys(&c);
        assert!(ok.ok, "{}", ok.detail);
        assert!(ok.detail.contains("2 key(s)") && ok.detail.contains("k2"));
        assert!(!ok.detail.contains(KEY));
        c.outbound.credential_active_key = "k9".into();
        assert!(!check_credential_keys(&c).ok);
    }

    #[test]
    fn default_timeouts_fit_the_window() {
        assert!(check_timeouts(&Config::default()).ok);
        let c = Config {
            proxy_read_timeout_seconds: 60,
            ..Config::default()
        };
        assert!(!check_timeouts(&c).ok);
        let mut c = Config::default();
        c.limits.observation_window_seconds = 300;
        assert!(!check_timeouts(&c).ok);
        let mut c = Config::default();
        c.upstream.request_timeout_ms = 120_000;
        assert!(!check_timeouts(&c).ok);
    }

    #[test]
    fn reconciler_must_be_enabled_with_a_sane_interval() {
        assert!(check_reconciler(&Config::default()).ok);
        let mut c = Config::default();
        c.reconciler.enabled = false;
        assert!(!check_reconciler(&c).ok);
        c.reconciler.enabled = true;
        c.reconciler.interval_ms = 10;
        assert!(!check_reconciler(&c).ok);
    }
}
