//! The kit's verdicts: each promise is kept, broken, partly checked or not checked, with the
//! evidence that says so, and the table `contract-check` prints. A promise is broken as soon as
//! one observation breaks it; it is kept only when every observation kept it; one kept by some
//! observations while others could not be judged (no definite answer, a 5xx) is "partly
//! checked", never kept; a promise nothing could be observed for is "not checked".

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::client::{indefinite, Reply};

/// A promise of Q's contract (`docs/upstream-api.md`) the gateway relies on, as the kit checks
/// it (docs/contract-kit.md says how). The id is what the table prints and what the broken
/// reference's `--break` switch is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Promise {
    CreateOnce,
    CreateConflict,
    LookupCommitted,
    LookupAbsent,
    RunEvents,
    RunFeedOrder,
    RunFeedComplete,
    RunFeedHead,
    RunFeedEpoch,
    RunFeedFloor,
    AccessReflects,
    AccessFeedComplete,
    AccessFeedAfterApi,
    AccessFeedOrder,
    AccessFeedHead,
    AccessFeedEpoch,
    AccessFeedFloor,
    ErrorStatuses,
}

impl Promise {
    /// Every promise, in the table's order.
    pub const ALL: [Promise; 18] = [
        Promise::CreateOnce,
        Promise::CreateConflict,
        Promise::LookupCommitted,
        Promise::LookupAbsent,
        Promise::RunEvents,
        Promise::RunFeedOrder,
        Promise::RunFeedComplete,
        Promise::RunFeedHead,
        Promise::RunFeedEpoch,
        Promise::RunFeedFloor,
        Promise::AccessReflects,
        Promise::AccessFeedComplete,
        Promise::AccessFeedAfterApi,
        Promise::AccessFeedOrder,
        Promise::AccessFeedHead,
        Promise::AccessFeedEpoch,
        Promise::AccessFeedFloor,
        Promise::ErrorStatuses,
    ];

    pub fn id(self) -> &'static str {
        match self {
            Promise::CreateOnce => "create-once",
            Promise::CreateConflict => "create-conflict",
            Promise::LookupCommitted => "lookup-committed",
            Promise::LookupAbsent => "lookup-absent",
            Promise::RunEvents => "run-events",
            Promise::RunFeedOrder => "run-feed-order",
            Promise::RunFeedComplete => "run-feed-complete",
            Promise::RunFeedHead => "run-feed-head",
            Promise::RunFeedEpoch => "run-feed-epoch",
            Promise::RunFeedFloor => "run-feed-floor",
            Promise::AccessReflects => "access-reflects",
            Promise::AccessFeedComplete => "access-feed-complete",
            Promise::AccessFeedAfterApi => "access-feed-after-api",
            Promise::AccessFeedOrder => "access-feed-order",
            Promise::AccessFeedHead => "access-feed-head",
            Promise::AccessFeedEpoch => "access-feed-epoch",
            Promise::AccessFeedFloor => "access-feed-floor",
            Promise::ErrorStatuses => "error-statuses",
        }
    }
}

/// One observation about a promise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    Kept(String),
    Broken(String),
    NotChecked(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Kept,
    Broken,
    PartlyChecked,
    NotChecked,
}

impl Verdict {
    fn label(self) -> &'static str {
        match self {
            Verdict::Kept => "kept",
            Verdict::Broken => "BROKEN",
            Verdict::PartlyChecked => "partly checked",
            Verdict::NotChecked => "not checked",
        }
    }
}

/// Broken if anything broke it; kept if something was observed, everything observed kept it
/// and nothing was left unjudged; partly checked if something kept it and something else
/// could not be judged; not checked when nothing could be.
pub fn verdict(findings: &[Finding]) -> Verdict {
    let any = |f: fn(&Finding) -> bool| findings.iter().any(f);
    if any(|f| matches!(f, Finding::Broken(_))) {
        Verdict::Broken
    } else if any(|f| matches!(f, Finding::Kept(_))) {
        if any(|f| matches!(f, Finding::NotChecked(_))) {
            Verdict::PartlyChecked
        } else {
            Verdict::Kept
        }
    } else {
        Verdict::NotChecked
    }
}

/// What the checks found, promise by promise; the checks that run at once share it.
#[derive(Debug, Default)]
pub struct Findings(Mutex<BTreeMap<Promise, Vec<Finding>>>);

impl Findings {
    pub fn add(&self, promise: Promise, finding: Finding) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(promise)
            .or_default()
            .push(finding);
    }

    pub fn extend(&self, promise: Promise, findings: Vec<Finding>) {
        for finding in findings {
            self.add(promise, finding);
        }
    }

    pub fn kept(&self, promise: Promise, text: impl Into<String>) {
        self.add(promise, Finding::Kept(text.into()));
    }

    pub fn broken(&self, promise: Promise, text: impl Into<String>) {
        self.add(promise, Finding::Broken(text.into()));
    }

    pub fn not_checked(&self, promise: Promise, text: impl Into<String>) {
        self.add(promise, Finding::NotChecked(text.into()));
    }

    /// Kept with `ok` when the condition holds, broken with `broken` otherwise.
    pub fn judge(&self, promise: Promise, holds: bool, ok: String, broken: String) {
        if holds {
            self.kept(promise, ok);
        } else {
            self.broken(promise, broken);
        }
    }

    /// [`Findings::judge`] on an answer of Q: when Q gave none that is definite (no answer, a
    /// 5xx), nothing can be concluded from it, and `broken` is reported as not checked.
    pub fn judge_reply(
        &self,
        promise: Promise,
        reply: &Reply,
        holds: bool,
        ok: String,
        broken: String,
    ) {
        if indefinite(reply) {
            self.not_checked(promise, broken);
        } else {
            self.judge(promise, holds, ok, broken);
        }
    }

    pub fn into_map(self) -> BTreeMap<Promise, Vec<Finding>> {
        self.0.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

/// A run the kit created, and what became of it at the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedRun {
    pub run_id: String,
    pub workflow_id: String,
    pub cleanup: String,
}

/// The whole result: every promise with its evidence, and the runs created.
#[derive(Debug, Clone)]
pub struct Report {
    /// What the kit ran against and with which inputs, printed above the table.
    pub header: Vec<String>,
    pub promises: Vec<(Promise, Vec<Finding>)>,
    pub runs: Vec<CreatedRun>,
}

impl Report {
    pub fn new(header: Vec<String>, findings: Findings, runs: Vec<CreatedRun>) -> Report {
        let mut found = findings.into_map();
        let promises = Promise::ALL
            .iter()
            .map(|p| (*p, found.remove(p).unwrap_or_default()))
            .collect();
        Report {
            header,
            promises,
            runs,
        }
    }

    pub fn count(&self, wanted: Verdict) -> usize {
        self.promises
            .iter()
            .filter(|(_, f)| verdict(f) == wanted)
            .count()
    }

    /// 1 when a promise is broken; 3 when none is but one is only partly checked (or, with
    /// `strict`, not checked at all); else 0.
    pub fn exit_code(&self, strict: bool) -> i32 {
        if self.count(Verdict::Broken) > 0 {
            1
        } else if self.count(Verdict::PartlyChecked) > 0
            || (strict && self.count(Verdict::NotChecked) > 0)
        {
            3
        } else {
            0
        }
    }

    /// The table: one row per promise with its result, then its evidence (what broke it
    /// first, then what could not be checked, then what was seen kept), then the runs.
    pub fn render(&self) -> String {
        let width = Promise::ALL.iter().map(|p| p.id().len()).max().unwrap_or(8);
        let result_width = "partly checked".len();
        let indent = " ".repeat(width + result_width + 4);
        let mut out = String::new();
        for line in &self.header {
            out.push_str(line);
            out.push('\n');
        }
        out.push_str(&format!(
            "\n{:width$}  {:result_width$}  EVIDENCE\n",
            "PROMISE", "RESULT"
        ));
        for (promise, findings) in &self.promises {
            let verdict = verdict(findings);
            let mut lines = evidence(findings);
            if lines.is_empty() {
                lines.push("nothing was observed".to_owned());
            }
            for (i, line) in lines.iter().enumerate() {
                if i == 0 {
                    out.push_str(&format!(
                        "{:width$}  {:result_width$}  {line}\n",
                        promise.id(),
                        verdict.label()
                    ));
                } else {
                    out.push_str(&format!("{indent}{line}\n"));
                }
            }
        }
        out.push_str(&format!(
            "\ncontract-check: {} kept, {} broken, {} partly checked, {} not checked (of {} promises)\n",
            self.count(Verdict::Kept),
            self.count(Verdict::Broken),
            self.count(Verdict::PartlyChecked),
            self.count(Verdict::NotChecked),
            self.promises.len()
        ));
        if self.runs.is_empty() {
            out.push_str("runs created: none\n");
        } else {
            out.push_str(&format!(
                "runs created ({}), each canceled at the end:\n",
                self.runs.len()
            ));
            for run in &self.runs {
                out.push_str(&format!(
                    "  {} {}: {}\n",
                    run.run_id, run.workflow_id, run.cleanup
                ));
            }
        }
        out
    }
}

/// A promise's evidence lines: broken first, then not checked, then kept.
fn evidence(findings: &[Finding]) -> Vec<String> {
    let mut lines = Vec::new();
    for f in findings {
        if let Finding::Broken(text) = f {
            lines.push(format!("broken: {text}"));
        }
    }
    for f in findings {
        if let Finding::NotChecked(text) = f {
            lines.push(format!("not checked: {text}"));
        }
    }
    for f in findings {
        if let Finding::Kept(text) = f {
            lines.push(text.clone());
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_broken_observation_breaks_a_promise_and_nothing_observed_is_not_kept() {
        let kept = Finding::Kept("ok".into());
        let broken = Finding::Broken("no".into());
        let unchecked = Finding::NotChecked("no hook".into());
        assert_eq!(verdict(&[]), Verdict::NotChecked);
        assert_eq!(
            verdict(std::slice::from_ref(&unchecked)),
            Verdict::NotChecked
        );
        // Kept by one observation, unjudged by another: not kept.
        assert_eq!(
            verdict(&[kept.clone(), unchecked.clone()]),
            Verdict::PartlyChecked
        );
        assert_eq!(verdict(std::slice::from_ref(&kept)), Verdict::Kept);
        assert_eq!(verdict(&[kept, broken, unchecked]), Verdict::Broken);
    }

    /// Partly checked fails the run by default; not checked only with `--strict`.
    #[test]
    fn a_partly_checked_promise_fails_the_run() {
        let findings = Findings::default();
        for p in Promise::ALL {
            findings.kept(p, "ok");
        }
        findings.not_checked(Promise::LookupAbsent, "Q answered 503");
        let report = Report::new(Vec::new(), findings, Vec::new());
        assert_eq!(report.count(Verdict::PartlyChecked), 1);
        assert_eq!((report.exit_code(false), report.exit_code(true)), (3, 3));
        assert!(report
            .render()
            .contains("17 kept, 0 broken, 1 partly checked, 0 not checked"));
    }

    #[test]
    fn no_definite_answer_neither_keeps_nor_breaks_a_promise() {
        let findings = Findings::default();
        let lost: Reply = Err("connection reset".into());
        let p = Promise::LookupAbsent;
        findings.judge_reply(
            p,
            &lost,
            false,
            "ok".into(),
            "the lookup answered nothing".into(),
        );
        let found = findings.into_map();
        assert_eq!(
            found[&p],
            [Finding::NotChecked("the lookup answered nothing".into())]
        );
    }

    #[test]
    fn every_promise_has_a_distinct_id_and_a_row() {
        let ids: std::collections::BTreeSet<_> = Promise::ALL.iter().map(|p| p.id()).collect();
        assert_eq!(ids.len(), Promise::ALL.len());
        let report = Report::new(Vec::new(), Findings::default(), Vec::new());
        assert_eq!(report.promises.len(), Promise::ALL.len());
        // Nothing observed: every promise is "not checked", none kept, and only --strict fails.
        assert_eq!(report.count(Verdict::NotChecked), Promise::ALL.len());
        assert_eq!((report.exit_code(false), report.exit_code(true)), (0, 3));
    }

    #[test]
    fn the_table_shows_each_verdict_with_its_evidence_and_the_runs() {
        let findings = Findings::default();
        findings.kept(Promise::CreateOnce, "8 creates: one run");
        findings.broken(Promise::CreateConflict, "a changed request answered 200");
        findings.kept(Promise::CreateConflict, "a replay answered 200");
        findings.not_checked(Promise::AccessReflects, "no hook given");
        let runs = vec![CreatedRun {
            run_id: "run-1".into(),
            workflow_id: "contract-check-x-once".into(),
            cleanup: "canceled".into(),
        }];
        let report = Report::new(vec!["Q: http://q".into()], findings, runs);
        let table = report.render();
        let row = |id: &str| {
            table
                .lines()
                .find(|l| l.starts_with(&format!("{id} ")))
                .unwrap_or_else(|| panic!("no row {id} in\n{table}"))
                .to_owned()
        };
        assert!(row("create-once").contains(" kept "), "{table}");
        assert!(row("create-conflict").contains(" BROKEN "));
        assert!(row("create-conflict").ends_with("broken: a changed request answered 200"));
        // Further evidence lines stand under the first, in the evidence column.
        let column = row("create-once").find("8 creates").unwrap();
        assert!(table.contains(&format!("\n{}a replay answered 200\n", " ".repeat(column))));
        assert!(row("access-reflects").contains(" not checked     not checked: no hook given"));
        assert!(row("error-statuses").contains("nothing was observed"));
        assert!(table.starts_with("Q: http://q\n"));
        assert!(table
            .contains("contract-check: 1 kept, 1 broken, 0 partly checked, 16 not checked (of 18"));
        assert!(table.contains("  run-1 contract-check-x-once: canceled\n"));
        assert_eq!(report.exit_code(false), 1);
    }
}
