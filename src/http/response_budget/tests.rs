use super::*;
use http_body_util::BodyExt;

const MIB: usize = 1024 * 1024;

fn ledger(process: usize, per_connection: usize) -> Arc<ConnectionLedger> {
    ConnectionLedger::new(ResponseBudget::new(process, per_connection))
}

fn answer(ledger: &Arc<ConnectionLedger>, bytes: usize) -> Result<Budgeted, &'static str> {
    let ticket = ledger.admit(Some(bytes as u64))?;
    Ok(Budgeted::new(Body::from(vec![b'x'; bytes]), ticket))
}

#[tokio::test]
async fn large_answers_past_either_budget_are_refused_small_ones_pass() {
    let budget = ResponseBudget::new(3 * MIB, 2 * MIB);
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
    let ticket = ledger.admit(None).unwrap();
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
