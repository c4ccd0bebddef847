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

/// A pool of `max_in_flight` slots, strangers taking up to half of them.
fn pool(max_in_flight: usize) -> PoolBounds {
    PoolBounds {
        max_in_flight,
        stranger_in_flight: (max_in_flight / 2).max(1),
        known_for: Duration::from_secs(3_600),
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
    let cache = TokenCache::new(
        bounds(5_000, 100),
        bounds(1_000, 100),
        Duration::ZERO,
        pool(64),
    );
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
    let cache = TokenCache::new(
        bounds(5_000, 100),
        bounds(1_000, 100),
        Duration::ZERO,
        pool(64),
    );
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
    let cache = TokenCache::new(
        bounds(5_000, 100),
        bounds(150, 100),
        Duration::ZERO,
        pool(64),
    );
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
    let cache = TokenCache::new(
        bounds(150, 100),
        bounds(1_000, 100),
        Duration::ZERO,
        pool(64),
    );
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
        pool(64),
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

/// Past its share of the pool a lookup is shed at once, never waits: strangers take at most
/// theirs, and known tokens (here re-checks, which always ask Q) the rest.
#[tokio::test]
async fn strangers_take_at_most_their_share_and_known_tokens_the_rest() {
    let pool = PoolBounds {
        max_in_flight: 4,
        stranger_in_flight: 2,
        known_for: Duration::from_secs(3_600),
    };
    let cache = TokenCache::new(bounds(5_000, 100), bounds(1_000, 100), Duration::ZERO, pool);
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let active = Ok(Verdict::Active(principal(&[])));
    for n in 100..103 {
        assert!(cache
            .principal(key(n), None, || introspection(&calls, 0, active.clone()))
            .await
            .is_ok());
    }
    let before = calls_of(&calls);
    let strangers = (0..5)
        .map(|n| cache.principal(key(n), None, || introspection(&calls, 200, active.clone())));
    let rechecks = (100..103).map(|n| {
        cache.principal(key(n), Some(Duration::ZERO), || {
            introspection(&calls, 200, active.clone())
        })
    });
    let (strangers, rechecks) = futures_util::future::join(
        futures_util::future::join_all(strangers),
        futures_util::future::join_all(rechecks),
    )
    .await;
    let shed = |results: &[Result<Principal, Arc<Miss<&str>>>], standing| {
        results
            .iter()
            .filter(|r| matches!(r, Err(e) if matches!(**e, Miss::Shed(s) if s == standing)))
            .count()
    };
    assert_eq!(shed(&strangers, Standing::Stranger), 3);
    assert_eq!(shed(&rechecks, Standing::Known), 1, "the pool was full");
    assert_eq!(rechecks.iter().filter(|r| r.is_ok()).count(), 2);
    assert_eq!(calls_of(&calls) - before, 4);
    // Once they are done, there is room again.
    assert!(cache
        .principal(key(9), None, || introspection(&calls, 0, active))
        .await
        .is_ok());
}

/// A token is known once Q calls it active, and a stranger again once Q calls it inactive.
#[tokio::test]
async fn a_token_is_known_from_its_active_answer_until_an_inactive_one() {
    let cache = TokenCache::new(
        bounds(5_000, 100),
        bounds(1_000, 100),
        Duration::ZERO,
        pool(8),
    );
    let calls = std::sync::atomic::AtomicUsize::new(0);
    assert!(cache.unknown(&key(1)));
    assert_eq!(cache.pool.standing(&key(1)), Standing::Stranger);
    let active = Ok(Verdict::Active(principal(&[])));
    assert!(cache
        .principal(key(1), None, || introspection(&calls, 0, active))
        .await
        .is_ok());
    assert_eq!(cache.pool.standing(&key(1)), Standing::Known);
    cache.active.invalidate(&key(1)).await;
    assert!(!cache.unknown(&key(1)), "known, though no longer cached");
    let revoked = cache.principal(key(1), Some(Duration::ZERO), || {
        introspection(&calls, 0, Ok(Verdict::Inactive))
    });
    assert!(revoked.await.is_err());
    assert_eq!(cache.pool.standing(&key(1)), Standing::Stranger);
    assert!(!cache.unknown(&key(1)), "cached as inactive");
}

/// An observation's re-check takes only an answer to an introspection sent within its bound.
#[tokio::test]
async fn a_recheck_asks_q_again_once_the_cached_answer_is_older_than_it_asks() {
    let cache = TokenCache::new(
        bounds(5_000, 100),
        bounds(1_000, 100),
        Duration::ZERO,
        pool(64),
    );
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
