use super::*;
use http_body_util::BodyExt;

const MIB: usize = 1024 * 1024;

fn ledger(process: usize, per_connection: usize) -> Arc<ConnectionLedger> {
    ConnectionLedger::new(ResponseBudget::new(
        process,
        per_connection,
        ShareFractions::WHOLE,
    ))
}

fn answer(ledger: &Arc<ConnectionLedger>, bytes: usize) -> Result<Budgeted, &'static str> {
    let ticket = ledger.admit(Some(bytes as u64), None, None)?;
    Ok(Budgeted::new(Body::from(vec![b'x'; bytes]), ticket))
}

#[tokio::test]
async fn large_answers_past_either_budget_are_refused_small_ones_pass() {
    let budget = ResponseBudget::new(3 * MIB, 2 * MIB, ShareFractions::WHOLE);
    let first = ConnectionLedger::new(budget.clone());
    let second = ConnectionLedger::new(budget.clone());
    let a = answer(&first, MIB).unwrap();
    let b = answer(&first, MIB).unwrap();
    assert_eq!(answer(&first, MIB).unwrap_err(), "connection");
    let c = answer(&second, MIB).unwrap();
    assert_eq!(
        answer(&second, MIB).unwrap_err(),
        "process",
        "3 MiB for the process"
    );
    assert_eq!(budget.buffered(), 3 * MIB);
    // Small answers always pass, and count.
    let small = answer(&first, ALWAYS_ADMITTED).unwrap();
    assert_eq!(budget.buffered(), 3 * MIB + ALWAYS_ADMITTED);
    drop((a, small));
    assert_eq!(budget.buffered(), 2 * MIB);
    assert!(answer(&second, MIB).is_ok(), "a refusal kept nothing");
    drop((b, c));
    assert_eq!(budget.buffered(), 0);
}

#[tokio::test]
async fn an_answer_goes_out_in_parts_and_its_bytes_are_given_back_at_its_end() {
    let ledger = ledger(4 * MIB, 2 * MIB);
    let mut body = answer(&ledger, MIB + 5).unwrap();
    assert_eq!(body.size_hint().exact(), Some(MIB as u64 + 5));
    let mut parts = Vec::new();
    while let Some(frame) = body.frame().await {
        let data = frame.unwrap().into_data().unwrap();
        assert!(data.len() <= CHUNK);
        // Counted until the client took the whole answer.
        assert_eq!(ledger.budget.buffered(), MIB + 5);
        parts.push(data.len());
    }
    assert_eq!(parts.iter().sum::<usize>(), MIB + 5);
    assert_eq!(parts.len(), MIB / CHUNK + 1);
    assert_eq!(ledger.budget.buffered(), 0);
    assert!(ledger.oldest_wait().is_none());
}

#[tokio::test]
async fn stream_frames_count_until_the_next_one_is_asked_for() {
    let ledger = ledger(4 * MIB, 2 * MIB);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let ticket = ledger.admit(None, None, None).unwrap();
    let mut body = Budgeted::new(Body::from_stream(stream), ticket);
    tx.send(Ok(Bytes::from(vec![b'e'; 3 * MIB]))).await.unwrap();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first.len(), CHUNK);
    assert_eq!(
        ledger.budget.buffered(),
        3 * MIB,
        "a stream frame is never refused, and counts"
    );
    drop(body);
    assert_eq!(ledger.budget.buffered(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_answer_not_taken_within_the_limit_stalls_its_connection() {
    let limit = Duration::from_secs(30);
    let ledger = ledger(4 * MIB, 2 * MIB);
    // Taken part by part, each within the limit: no stall.
    let mut taken = answer(&ledger, 4 * CHUNK).unwrap();
    for _ in 0..4 {
        tokio::time::advance(limit / 2).await;
        taken.frame().await.unwrap().unwrap();
    }
    let stalled = tokio::time::timeout(limit / 2, ledger.stalled(limit)).await;
    assert!(stalled.is_err(), "a client taking each part in time");
    drop(taken);
    // Nothing waiting: no stall, however long.
    assert!(tokio::time::timeout(4 * limit, ledger.stalled(limit))
        .await
        .is_err());
    // One answer whose first part is never asked for.
    let started = Instant::now();
    let never_taken = answer(&ledger, 2 * CHUNK).unwrap();
    ledger.stalled(limit).await;
    assert_eq!(started.elapsed(), limit);
    drop(never_taken);
}

/// An answer of `bytes` for `payer`, admitted as the route admits it (with its reservation).
fn answer_for(
    ledger: &Arc<ConnectionLedger>,
    payer: &Payer,
    bytes: usize,
    reservation: Option<Reservation>,
) -> Result<Budgeted, &'static str> {
    let ticket = ledger.admit(Some(bytes as u64), Some(payer.clone()), reservation)?;
    Ok(Budgeted::new(Body::from(vec![b'x'; bytes]), ticket))
}

fn shared_budget() -> Arc<ResponseBudget> {
    // 8 MiB: a tenant's share 4 MiB, a principal's 2 MiB.
    ResponseBudget::new(
        8 * MIB,
        8 * MIB,
        ShareFractions {
            tenant: 0.5,
            principal: 0.25,
        },
    )
}

#[tokio::test]
async fn a_principal_and_a_tenant_hold_at_most_their_shares_and_others_keep_theirs() {
    let budget = shared_budget();
    let alice = Payer::new("t-acme", "p-alice");
    let bob = Payer::new("t-acme", "p-bob");
    let erin = Payer::new("t-acme", "p-erin");
    let carol = Payer::new("t-globex", "p-carol");
    // Same principal id in another tenant: another principal.
    let alice_elsewhere = Payer::new("t-globex", "p-alice");
    let connections: Vec<_> = (0..6)
        .map(|_| ConnectionLedger::new(budget.clone()))
        .collect();
    let a1 = answer_for(&connections[0], &alice, MIB, None).unwrap();
    let a2 = answer_for(&connections[1], &alice, MIB, None).unwrap();
    assert_eq!(
        answer_for(&connections[2], &alice, MIB, None).unwrap_err(),
        "principal",
        "Alice's 2 MiB are spent, on whichever connection"
    );
    let b1 = answer_for(&connections[2], &bob, MIB, None).unwrap();
    let b2 = answer_for(&connections[3], &bob, MIB, None).unwrap();
    assert_eq!(
        answer_for(&connections[4], &erin, MIB, None).unwrap_err(),
        "tenant",
        "t-acme's 4 MiB are spent"
    );
    // Another tenant, and Alice's namesake in it, are served.
    let c1 = answer_for(&connections[4], &carol, MIB, None).unwrap();
    let c2 = answer_for(&connections[5], &alice_elsewhere, MIB, None).unwrap();
    // Small answers pass past any share, and count.
    let small = answer_for(&connections[0], &alice, ALWAYS_ADMITTED, None).unwrap();
    assert_eq!(budget.buffered(), 6 * MIB + ALWAYS_ADMITTED);
    drop((a1, small));
    assert!(answer_for(&connections[0], &alice, MIB, None).is_ok());
    drop((a2, b1, b2, c1, c2));
    assert_eq!(budget.buffered(), 0);
    assert!(budget.tenants.map().is_empty() && budget.principals.map().is_empty());
}

#[tokio::test]
async fn a_reservation_is_cut_to_what_is_left_refused_below_its_least_and_becomes_the_answers_count(
) {
    let budget = shared_budget();
    let ledger = ConnectionLedger::new(budget.clone());
    let alice = Payer::new("t-acme", "p-alice");
    let held = answer_for(&ledger, &alice, MIB + MIB / 2, None).unwrap();
    // Half a MiB left of Alice's share: a request for 1 MiB gets it, cut.
    let cut = ledger.reserve(&alice, 0, MIB, 64 * 1024).unwrap();
    assert_eq!(cut.bytes, MIB / 2);
    assert_eq!(budget.buffered(), 2 * MIB);
    // Nothing left: refused, by the scope that was full, and nothing is counted.
    assert_eq!(
        ledger.reserve(&alice, 0, MIB, 64 * 1024).unwrap_err(),
        "principal"
    );
    assert_eq!(budget.buffered(), 2 * MIB);
    // The answer built within it is admitted on it: what it did not use is given back.
    let body = answer_for(&ledger, &alice, 100 * 1024, Some(cut)).unwrap();
    assert_eq!(budget.buffered(), MIB + MIB / 2 + 100 * 1024);
    drop(body);
    // An unspent reservation is given back when dropped.
    let unspent = ledger.reserve(&alice, 0, MIB / 4, MIB / 4).unwrap();
    assert_eq!(budget.buffered(), MIB + MIB / 2 + MIB / 4);
    drop(unspent);
    drop(held);
    assert_eq!(budget.buffered(), 0);
    // What an answer holds past its reservation (its envelope) counts, unrefused.
    let small = ledger.reserve(&alice, 0, 2 * MIB, 2 * MIB).unwrap();
    let over = answer_for(&ledger, &alice, 2 * MIB + 100, Some(small)).unwrap();
    assert_eq!(budget.buffered(), 2 * MIB + 100);
    drop(over);
    assert_eq!(budget.buffered(), 0);
    assert!(budget.principals.map().is_empty());
}

#[tokio::test]
async fn the_route_hands_the_reservation_to_the_answer() {
    let budget = shared_budget();
    let ledger = ConnectionLedger::new(budget.clone());
    let alice = Payer::new("t-acme", "p-alice");
    let space = AnswerSpace::new(Some(ledger.clone()), alice.clone());
    assert_eq!(space.reserve(MIB, MIB).unwrap(), MIB);
    assert_eq!(space.reserve(MIB, 1).unwrap(), MIB);
    assert!(matches!(
        space.reserve(MIB, 1),
        Err(HttpError::ResponseBufferFull { scope: "principal" })
    ));
    // A small top-up of a large answer is no small answer: refused too.
    assert!(!space.top_up(100));
    assert_eq!(budget.buffered(), 2 * MIB);
    let mut response = Body::from(vec![b'x'; 300 * 1024]).into_response();
    response.extensions_mut().insert(space.into_extension());
    let mut request = Request::new(Body::empty());
    request.extensions_mut().insert(ledger.clone());
    let kept = AdmitAnswers.before(&mut request);
    let response = AdmitAnswers.after(kept, response);
    assert_eq!(response.status(), 200);
    assert_eq!(
        budget.buffered(),
        300 * 1024,
        "the rest of the 2 MiB given back"
    );
    drop(response);
    assert_eq!(budget.buffered(), 0);
    // Without a connection (a call from within the process), everything asked is granted.
    let inside = AnswerSpace::new(None, alice);
    assert_eq!(inside.reserve(usize::MAX, usize::MAX).unwrap(), usize::MAX);
}

#[tokio::test]
async fn an_answer_charged_to_a_caller_counts_against_its_share() {
    let budget = shared_budget();
    let ledger = ConnectionLedger::new(budget.clone());
    let admit = |bytes: usize| {
        let response = charged_to(
            Body::from(vec![b'x'; bytes]).into_response(),
            "t-acme",
            "p-alice",
        );
        let mut request = Request::new(Body::empty());
        request.extensions_mut().insert(ledger.clone());
        let kept = AdmitAnswers.before(&mut request);
        AdmitAnswers.after(kept, response)
    };
    let held = admit(2 * MIB);
    assert_eq!(held.status(), 200);
    // Alice's 2 MiB are held: her next large answer is refused, someone else's is not.
    assert_eq!(admit(MIB).status(), 503);
    let carol = answer_for(&ledger, &Payer::new("t-globex", "p-carol"), MIB, None).unwrap();
    drop((held, carol));
    assert_eq!(budget.buffered(), 0);
}
