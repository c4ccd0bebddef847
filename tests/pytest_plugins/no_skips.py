"""A pytest plugin scripts/test loads into every pytest suite (`-p no_skips`, with
tests/pytest_plugins on PYTHONPATH): a skipped test fails the run, so a suite that could not run its tests is never
counted as passing. Nothing is skipped today; this keeps it so."""

skipped: list[str] = []


def pytest_runtest_logreport(report):
    if report.skipped:
        skipped.append(report.nodeid)


def pytest_terminal_summary(terminalreporter):
    if skipped:
        terminalreporter.write_line(
            f"error: {len(skipped)} test(s) skipped, which fails the run: {', '.join(skipped)}",
            red=True)


def pytest_sessionfinish(session, exitstatus):
    if skipped and exitstatus == 0:
        session.exitstatus = 1
