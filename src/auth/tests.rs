use super::*;

fn principal(scopes: &[&str]) -> Principal {
    Claims {
        tenant_id: "t".into(),
        principal_id: "p".into(),
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
        tenant_features: vec![AGENT_API_FEATURE.into()],
    }
    .into()
}

#[test]
fn exact_and_wildcard_scopes() {
    assert!(principal(&["ai:answer", "a2a:read"])
        .require(Access::Read)
        .is_ok());
    assert!(principal(&["ai:*", "a2a:*"])
        .require(Access::Delegate)
        .is_ok());
    assert!(principal(&["ai:answer", "a2a:*"])
        .require(Access::Read)
        .is_ok());
}

#[test]
fn missing_scopes_are_named() {
    assert_eq!(
        principal(&["ai:answer", "a2a:read"]).require(Access::Delegate),
        Err(HttpError::InsufficientScope {
            missing: vec!["a2a:delegate"]
        })
    );
    assert_eq!(
        principal(&["a2a:read", "a2a:delegate"]).require(Access::Read),
        Err(HttpError::InsufficientScope {
            missing: vec!["ai:answer"]
        })
    );
}

#[test]
fn wildcards_do_not_cross_families_or_prefixes() {
    assert!(principal(&["a2a:*"]).require(Access::Read).is_err());
    assert!(principal(&["*", "a2a:read"]).require(Access::Read).is_err());
    assert!(principal(&["ai:answer", "a2a:read:*"])
        .require(Access::Read)
        .is_err());
    assert!(principal(&["ai:answerx", "a2a:read"])
        .require(Access::Read)
        .is_err());
}

#[test]
fn bearer_parsing() {
    let mut h = HeaderMap::new();
    assert_eq!(bearer_token(&h), None);
    h.insert(header::AUTHORIZATION, "Bearer abc".parse().unwrap());
    assert_eq!(bearer_token(&h), Some("abc"));
    h.insert(header::AUTHORIZATION, "bearer  abc ".parse().unwrap());
    assert_eq!(bearer_token(&h), Some("abc"));
    h.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
    assert_eq!(bearer_token(&h), None);
    h.insert(header::AUTHORIZATION, "Bearer ".parse().unwrap());
    assert_eq!(bearer_token(&h), None);
}

fn bounds(ttl_ms: u64, capacity: u64) -> CacheBounds {
    CacheBounds {
        ttl: Duration::from_millis(ttl_ms),
        capacity,
    }
}

fn key(n: u32) -> TokenKey {
    Sha256::digest(n.to_be_bytes()).into()
}

/// An introspection that counts its calls and answers `verdict` after `delay`.
async fn introspection(
    calls: &std::sync::atomic::AtomicUsize,
    delay_ms: u64,
    verdict: Result<Verdict, &'static str>,
) -> Result<Verdict, &'static str> {
    calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(delay_ms)).await;
    verdict
}

fn calls_of(calls: &std::sync::atomic::AtomicUsize) -> usize {
    calls.load(std::sync::atomic::Ordering::SeqCst)
}

#[tokio::test]
async fn concurrent_misses_share_one_introspection() {
    let cache = TokenCache::new(bounds(5_000, 100), bounds(1_000, 100), Duration::ZERO, 64);
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let verdict = Ok(Verdict::Active(principal(&["ai:answer"])));
    let results = futures_util::future::join_all(
        (0..20)
            .map(|_| cache.principal(key(1), None, || introspection(&calls, 50, verdict.clone()))),
    )
    .await;
    assert!(results
        .iter()
        .all(|r| r.as_ref().is_ok_and(|p| p.principal_id == "p")));
    assert_eq!(calls_of(&calls), 1);
    // Then served from the cache.
    assert!(cache
        .principal(key(1), None, || introspection(&calls, 0, verdict))
        .await
        .is_ok());
    assert_eq!(calls_of(&calls), 1);
}

#[tokio::test]
async fn a_failure_is_shared_with_its_waiters_and_not_cached() {
    let cache = TokenCache::new(bounds(5_000, 100), bounds(1_000, 100), Duration::ZERO, 64);
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let results = futures_util::future::join_all(
        (0..10).map(|_| cache.principal(key(1), None, || introspection(&calls, 50, Err("Q down")))),
    )
    .await;
    assert!(results.iter().all(|r| matches!(
        r.as_ref().map_err(|e| &**e),
        Err(Miss::Unavailable("Q down"))
    )));
    assert_eq!(calls_of(&calls), 1);
    let active = Ok(Verdict::Active(principal(&[])));
    assert!(cache
        .principal(key(1), None, || introspection(&calls, 0, active))
        .await
        .is_ok());
    assert_eq!(calls_of(&calls), 2, "the failure was not kept");
}

#[tokio::test]
async fn inactive_answers_are_kept_for_the_negative_ttl() {
    let cache = TokenCache::new(bounds(5_000, 100), bounds(150, 100), Duration::ZERO, 64);
    let calls = std::sync::atomic::AtomicUsize::new(0);
    for _ in 0..5 {
        let miss = cache
            .principal(key(1), None, || {
                introspection(&calls, 0, Ok(Verdict::Inactive))
            })
            .await
            .unwrap_err();
        assert!(matches!(*miss, Miss::Inactive));
    }
    assert_eq!(calls_of(&calls), 1);
    assert_eq!(cache.active.entry_count(), 0, "never in the active cache");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let active = Ok(Verdict::Active(principal(&[])));
    assert!(cache
        .principal(key(1), None, || introspection(&calls, 0, active))
        .await
        .is_ok());
    assert_eq!(
        calls_of(&calls),
        2,
        "asked again once the negative entry expired"
    );
}

#[tokio::test]
async fn active_answers_expire_after_the_ttl() {
    let cache = TokenCache::new(bounds(150, 100), bounds(1_000, 100), Duration::ZERO, 64);
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let active = Ok(Verdict::Active(principal(&[])));
    for _ in 0..3 {
        let found = cache.principal(key(1), None, || introspection(&calls, 0, active.clone()));
        assert!(found.await.is_ok());
    }
    assert_eq!(calls_of(&calls), 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let revoked = cache.principal(key(1), None, || {
        introspection(&calls, 0, Ok(Verdict::Inactive))
    });
    assert!(matches!(*revoked.await.unwrap_err(), Miss::Inactive));
    assert_eq!(calls_of(&calls), 2);
}

/// Each cache holds at most its capacity, and a flood of inactive tokens leaves every
/// active entry in place.
#[tokio::test]
async fn capacities_hold_and_inactive_tokens_cannot_evict_active_ones() {
    const ACTIVE: u64 = 50;
    const INACTIVE: u64 = 20;
    let cache = TokenCache::new(
        bounds(5_000, ACTIVE),
        bounds(5_000, INACTIVE),
        Duration::ZERO,
        64,
    );
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let active = Ok(Verdict::Active(principal(&[])));
    for n in 0..ACTIVE as u32 {
        let found = cache.principal(key(n), None, || introspection(&calls, 0, active.clone()));
        assert!(found.await.is_ok());
    }
    for n in 1_000..1_500 {
        let miss = cache.principal(key(n), None, || {
            introspection(&calls, 0, Ok(Verdict::Inactive))
        });
        assert!(miss.await.is_err());
    }
    cache.active.run_pending_tasks().await;
    cache.inactive.run_pending_tasks().await;
    assert!(
        cache.inactive.weighted_size() <= INACTIVE * TYPICAL_ENTRY_BYTES,
        "{}",
        cache.inactive.weighted_size()
    );
    assert_eq!(cache.active.entry_count(), ACTIVE);
    let before = calls_of(&calls);
    for n in 0..ACTIVE as u32 {
        let found = cache.principal(key(n), None, || {
            introspection(&calls, 0, Ok(Verdict::Inactive))
        });
        assert!(found.await.is_ok(), "active entry {n} survived");
    }
    assert_eq!(calls_of(&calls), before, "all served from the cache");

    // Many more active tokens than the capacity: the active cache stays bounded.
    for n in 10_000..10_500 {
        let found = cache.principal(key(n), None, || introspection(&calls, 0, active.clone()));
        assert!(found.await.is_ok());
    }
    cache.active.run_pending_tasks().await;
    assert!(
        cache.active.weighted_size() <= ACTIVE * TYPICAL_ENTRY_BYTES,
        "{}",
        cache.active.weighted_size()
    );
}

#[test]
fn bearer_values_that_are_no_token_are_refused_without_asking_q() {
    for ok in ["tok-alice", "abc.def_ghi~jkl+mno/pqr==", "x"] {
        assert!(well_formed_token(ok), "{ok}");
    }
    for bad in [
        "",
        "==",
        "tok alice",
        "tok,alice",
        "tok\"alice",
        "tök",
        "a=b",
        &"a".repeat(MAX_TOKEN_BYTES + 1),
    ] {
        assert!(!well_formed_token(bad), "{bad:?}");
    }
}

/// Past the cap of introspections in flight a lookup is shed at once, never waits.
#[tokio::test]
async fn introspections_in_flight_are_capped() {
    let cache = TokenCache::new(bounds(5_000, 100), bounds(1_000, 100), Duration::ZERO, 2);
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let active = Ok(Verdict::Active(principal(&[])));
    let lookups = (0..5)
        .map(|n| cache.principal(key(n), None, || introspection(&calls, 200, active.clone())));
    let results = futures_util::future::join_all(lookups).await;
    let shed = results
        .iter()
        .filter(|r| matches!(r, Err(e) if matches!(**e, Miss::Shed)))
        .count();
    assert_eq!((shed, calls_of(&calls)), (3, 2));
    // Once they are done, there is room again.
    assert!(cache
        .principal(key(9), None, || introspection(&calls, 0, active))
        .await
        .is_ok());
}

/// An observation's re-check takes only an answer to an introspection sent within its bound.
#[tokio::test]
async fn a_recheck_asks_q_again_once_the_cached_answer_is_older_than_it_asks() {
    let cache = TokenCache::new(bounds(5_000, 100), bounds(1_000, 100), Duration::ZERO, 64);
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let active = Ok(Verdict::Active(principal(&[])));
    let within = Some(Duration::from_millis(100));
    assert!(cache
        .principal(key(1), None, || introspection(&calls, 0, active.clone()))
        .await
        .is_ok());
    assert!(cache
        .principal(key(1), within, || introspection(&calls, 0, active))
        .await
        .is_ok());
    assert_eq!(calls_of(&calls), 1, "a fresh answer serves the re-check");
    tokio::time::sleep(Duration::from_millis(150)).await;
    let revoked = cache.principal(key(1), within, || {
        introspection(&calls, 0, Ok(Verdict::Inactive))
    });
    assert!(
        revoked.await.is_err(),
        "an answer older than the bound served the re-check"
    );
    assert_eq!(calls_of(&calls), 2);
}

#[test]
fn an_active_answer_without_identity_is_inactive() {
    let answer = |tenant: Option<&str>| Introspection {
        active: true,
        tenant_id: tenant.map(str::to_owned),
        principal_id: Some("p".into()),
        scopes: vec![],
        tenant_features: vec![],
    };
    assert!(matches!(Verdict::from(answer(None)), Verdict::Inactive));
    assert!(matches!(
        Verdict::from(answer(Some("t"))),
        Verdict::Active(_)
    ));
    let inactive = Introspection {
        active: false,
        ..answer(Some("t"))
    };
    assert!(matches!(Verdict::from(inactive), Verdict::Inactive));
}

#[test]
fn feature_is_required() {
    let p = principal(&["ai:answer"]);
    assert!(p.require_feature().is_ok());
    let p = Principal::from(Claims {
        tenant_features: vec![],
        tenant_id: p.tenant_id.clone(),
        principal_id: p.principal_id.clone(),
        scopes: p.scopes.clone(),
    });
    assert!(matches!(
        p.require_feature(),
        Err(HttpError::FeatureDisabled { .. })
    ));
}
