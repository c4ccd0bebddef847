use super::lease_keys;

/// The part of a key Redis Cluster hashes: between the first `{` and the next `}`, when
/// that is not empty; else the whole key.
fn hashed(key: &str) -> &str {
    if let Some(open) = key.find('{') {
        if let Some(len) = key[open + 1..].find('}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

/// The acquire script touches the three keys at once: on a cluster they must share a slot,
/// whatever the prefix, tenant and principal hold.
#[test]
fn a_callers_three_keys_hash_alike_and_callers_stay_apart() {
    for (prefix, tenant, principal) in [
        ("q-a2a", "t-acme", "p-alice"),
        ("", "t", "p"),
        ("a}b", "{t}", "}p{"),
        ("{x", "t:1", "p:2"),
    ] {
        let keys = lease_keys(prefix, tenant, principal);
        assert!(!hashed(&keys[0]).is_empty());
        assert!(
            keys.iter().all(|k| hashed(k) == hashed(&keys[0])),
            "{keys:?}"
        );
        assert_eq!(lease_keys(prefix, "other", "p")[0], keys[0]);
    }
    // Length prefixes: ("a:1", "b") and ("a", "1:b") differ.
    assert_ne!(
        lease_keys("q", "a:1", "b")[2],
        lease_keys("q", "a", "1:b")[2]
    );
}
