//! The registration API: authentication and scope, validation, write-only sealed credentials,
//! tenant isolation, update rules for the credential, deletion, and the paged listing.

use reqwest::Method;
use serde_json::{json, Value};

use super::CAROL_ADMIN;
use crate::support::outbound::{id_of, OutboundGateway, ADMIN};
use crate::support::python::Remote;

#[tokio::test]
async fn registrations_crud_tenant_isolation_and_validation() {
    let gw = OutboundGateway::start(&[]).await;
    let endpoint = "http://127.0.0.1:9/a2a/rpc";
    let body = json!({"name": "Remote", "endpoint": endpoint});

    // Authentication and the management scope.
    let (status, _) = gw
        .call(Method::POST, "/v1/a2a/agents", None, Some(body.clone()))
        .await;
    assert_eq!(status, 401);
    let (status, v) = gw
        .call(
            Method::POST,
            "/v1/a2a/agents",
            Some("tok-alice"),
            Some(body.clone()),
        )
        .await;
    assert_eq!(status, 403);
    assert_eq!(v["requiredScopes"], json!(["a2a:agents"]));
    let (status, _) = gw
        .call(Method::GET, "/v1/a2a/agents", Some("tok-alice-wild"), None)
        .await;
    assert_eq!(status, 200, "a2a:* satisfies a2a:agents");

    // Validation: each refused with the field named, nothing stored.
    let invalid = [
        (json!({"endpoint": endpoint}), "name"),
        (json!({"name": " ", "endpoint": endpoint}), "name"),
        (
            json!({"name": "x".repeat(201), "endpoint": endpoint}),
            "name",
        ),
        (json!({"name": "R"}), "endpoint"),
        (
            json!({"name": "R", "endpoint": "ftp://127.0.0.1/"}),
            "endpoint",
        ),
        (
            json!({"name": "R", "endpoint": "http://u:p@127.0.0.1:9/rpc"}),
            "endpoint",
        ),
        (
            json!({"name": "R", "endpoint": "http://127.0.0.1:9/rpc#x"}),
            "endpoint",
        ),
        (
            json!({"name": "R", "endpoint": "http://10.0.0.1/rpc"}),
            "endpoint",
        ),
        (
            json!({"name": "R", "endpoint": format!("https://a.example/{}", "p".repeat(2100))}),
            "endpoint",
        ),
        (
            json!({"name": "R", "endpoint": endpoint, "bearerToken": ""}),
            "bearerToken",
        ),
        (
            json!({"name": "R", "endpoint": endpoint, "bearerToken": "a b"}),
            "bearerToken",
        ),
        (
            json!({"name": "R", "endpoint": endpoint, "credentialKeyId": "k9"}),
            "body",
        ),
    ];
    for (body, field) in invalid {
        let (status, v) = gw.post_registration(body.clone()).await;
        assert_eq!(status, 400, "{body}: {v}");
        assert_eq!(v["field"], field, "{body}: {v}");
    }
    let big = json!({"name": "R", "endpoint": endpoint, "bearerToken": "x".repeat(70_000)});
    let (status, _) = gw.post_registration(big).await;
    assert_eq!(status, 413, "the 64 KiB body limit applies");
    assert_eq!(
        gw.db.count("SELECT count(*) FROM a2a_remote_agents").await,
        0
    );

    // Create: the credential is write-only.
    let secret = "tok-remote-secret-0123456789";
    let created = gw.register("Remote", endpoint, Some(secret)).await;
    let id = id_of(&created);
    assert!(id.starts_with("reg-"), "{created}");
    assert_eq!(created["hasCredential"], true);
    assert_eq!(created["credentialKeyId"], "k1");
    assert_eq!(created["endpoint"], endpoint);
    assert_eq!(created["discoveredCard"], Value::Null);
    assert!(!created.to_string().contains(secret));

    // At rest: ciphertext only.
    let client = gw.db.client().await;
    let row = client
        .query_one(
            "SELECT row_to_json(r)::text, credential_ciphertext FROM a2a_remote_agents r",
            &[],
        )
        .await
        .unwrap();
    let as_text: String = row.get(0);
    let ciphertext: Vec<u8> = row.get(1);
    assert!(!as_text.contains(secret));
    assert!(!ciphertext
        .windows(secret.len())
        .any(|w| w == secret.as_bytes()));
    assert!(
        ciphertext.len() >= secret.len() + 16,
        "AES-GCM adds its tag"
    );

    // Read, list, and another tenant's view.
    let (status, v) = gw.registration(&id).await;
    assert_eq!((status, v["id"].clone()), (200, json!(id)));
    assert!(!v.to_string().contains(secret));
    let (_, list) = gw
        .call(Method::GET, "/v1/a2a/agents", Some(ADMIN), None)
        .await;
    assert_eq!(list["agents"].as_array().unwrap().len(), 1);
    let (_, list) = gw
        .call(Method::GET, "/v1/a2a/agents", Some(CAROL_ADMIN), None)
        .await;
    assert_eq!(list["agents"], json!([]));
    for (method, body) in [
        (Method::GET, None),
        (Method::DELETE, None),
        (Method::PATCH, Some(json!({"name": "mine now"}))),
    ] {
        let (status, v) = gw.on_registration(method, &id, "", CAROL_ADMIN, body).await;
        assert_eq!(status, 404, "{v}");
    }
    let (status, _) = gw.registration("ag-writer").await;
    assert_eq!(status, 404, "Q agent ids are not registrations");

    // Update: rename keeps the credential; same origin keeps it; another origin drops it.
    let (status, v) = gw.patch(&id, json!({"name": "Renamed"})).await;
    assert_eq!(
        (status, v["name"].clone(), v["hasCredential"].clone()),
        (200, json!("Renamed"), json!(true))
    );
    let (_, v) = gw
        .patch(&id, json!({"endpoint": "http://127.0.0.1:9/other/rpc"}))
        .await;
    assert_eq!(v["hasCredential"], true, "same origin: {v}");
    let (_, v) = gw
        .patch(&id, json!({"endpoint": "http://127.0.0.1:10/a2a/rpc"}))
        .await;
    assert_eq!(
        v["hasCredential"], false,
        "another origin drops the credential: {v}"
    );
    assert_eq!(
        gw.db
            .count("SELECT count(*) FROM a2a_remote_agents WHERE credential_ciphertext IS NOT NULL")
            .await,
        0
    );
    let (_, v) = gw.patch(&id, json!({"bearerToken": "new-token"})).await;
    assert_eq!(v["hasCredential"], true);
    let (_, v) = gw.patch(&id, json!({"bearerToken": null})).await;
    assert_eq!(v["hasCredential"], false);
    let (status, v) = gw
        .patch(&id, json!({"endpoint": "http://169.254.169.254/latest"}))
        .await;
    assert_eq!((status, v["field"].clone()), (400, json!("endpoint")));

    // Delete.
    let (status, _) = gw
        .on_registration(Method::DELETE, &id, "", ADMIN, None)
        .await;
    assert_eq!(status, 204);
    assert_eq!(gw.registration(&id).await.0, 404);
}

/// `GET /v1/a2a/agents` as `token` with this query: the status and the body.
async fn list(gw: &OutboundGateway, token: &str, query: &str) -> (u16, Value) {
    gw.call(
        Method::GET,
        &format!("/v1/a2a/agents{query}"),
        Some(token),
        None,
    )
    .await
}

/// The listing pages through the tenant's registrations with signed tokens: pageSize 2 over
/// five gives three pages in creation order, none repeated or missed, and no page carries a
/// discovered card (`GET` of the registration still does). A pageSize out of range, an unknown
/// or repeated parameter, and an altered, unsigned or other tenant's pageToken are 400 naming
/// the parameter, and change nothing.
#[tokio::test]
async fn the_listing_is_paged_by_signed_tokens_and_carries_no_card() {
    let gw = OutboundGateway::start(&[]).await;
    let remote = Remote::start(&[]).await;
    let mut created = Vec::new();
    for n in 0..5 {
        let name = format!("agent-{n}");
        created.push(id_of(&gw.register(&name, &remote.rpc_url(), None).await));
    }
    let (status, v) = gw.discover(&created[1]).await;
    assert_eq!(status, 200, "{v}");
    assert!(v["discoveredCard"].is_object(), "{v}");

    let mut listed = Vec::new();
    let mut pages = Vec::new();
    let mut query = "?pageSize=2".to_string();
    loop {
        let (status, page) = list(&gw, ADMIN, &query).await;
        assert_eq!(status, 200, "{page}");
        let agents = page["agents"].as_array().unwrap().clone();
        assert!(!agents.is_empty() && agents.len() <= 2, "{page}");
        for agent in &agents {
            assert!(agent.get("discoveredCard").is_none(), "{agent}");
            assert!(agent.get("bearerToken").is_none(), "{agent}");
            listed.push(id_of(agent));
        }
        pages.push(agents);
        let next = page["nextPageToken"].as_str().unwrap().to_string();
        if next.is_empty() {
            break;
        }
        assert!(pages.len() < 5, "the listing does not end");
        query = format!("?pageSize=2&pageToken={next}");
    }
    assert_eq!(pages.len(), 3);
    assert_eq!(listed, created, "every registration once, oldest first");
    // The summary says the card was discovered; the registration itself serves it.
    assert!(pages[0][1]["discoveredAt"].is_string(), "{:?}", pages[0]);
    let (_, one) = gw.registration(&created[1]).await;
    assert_eq!(one["discoveredCard"]["name"], "Remote Markdown Agent");

    // The default page holds them all, and is the last.
    let (status, all) = list(&gw, ADMIN, "").await;
    assert_eq!(status, 200);
    assert_eq!(all["agents"].as_array().unwrap().len(), 5);
    assert_eq!(all["nextPageToken"], "");
    let (_, first) = list(&gw, ADMIN, "?pageSize=2").await;
    let token = first["nextPageToken"].as_str().unwrap().to_string();
    assert!(!token.is_empty());

    let altered = {
        let mut bytes = token.clone().into_bytes();
        bytes[2] = if bytes[2] == b'A' { b'B' } else { b'A' };
        String::from_utf8(bytes).unwrap()
    };
    let refusals = [
        ("?pageSize=0", "pageSize"),
        ("?pageSize=101", "pageSize"),
        ("?pageSize=-1", "pageSize"),
        ("?pageSize=two", "pageSize"),
        ("?pageSize=", "pageSize"),
        ("?pageSize=2&pageSize=3", "pageSize"),
        ("?page_size=2", "page_size"),
        (&format!("?pageToken={altered}") as &str, "pageToken"),
        ("?pageToken=not-a-token", "pageToken"),
        (&format!("?pageToken={token}x"), "pageToken"),
    ];
    for (query, field) in refusals {
        let (status, v) = list(&gw, ADMIN, query).await;
        assert_eq!(
            (status, v["error"].clone(), v["field"].clone()),
            (400, json!("invalid_request"), json!(field)),
            "{query}: {v}"
        );
    }
    // Another tenant's admin cannot continue this tenant's listing.
    let (status, v) = list(&gw, CAROL_ADMIN, &format!("?pageToken={token}")).await;
    assert_eq!(
        (status, v["field"].clone()),
        (400, json!("pageToken")),
        "{v}"
    );
    let (status, v) = list(&gw, CAROL_ADMIN, "").await;
    assert_eq!((status, v["agents"].clone()), (200, json!([])), "{v}");

    // Nothing changed.
    assert_eq!(
        gw.db.count("SELECT count(*) FROM a2a_remote_agents").await,
        5
    );
    let (_, again) = list(&gw, ADMIN, "").await;
    assert_eq!(again, all);
}
