//! The README is the entry page: short (under 200 lines), and it links to each document the
//! manual moved into. Every relative link in the README, `docs/*.md` and the chart's README
//! resolves: the file exists and, for `#anchor`, the target has that heading (GitHub's
//! slugs).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::support::repo_path;

/// The documents the README's "Where to read next" must reach.
const MOVED: &[&str] = &[
    "docs/configuration.md",
    "docs/methods.md",
    "docs/operations.md",
    "docs/performance.md",
    "docs/conformance.md",
    "docs/development.md",
    "helm/q-a2a-gateway/README.md",
];

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The text outside fenced code blocks.
fn prose(text: &str) -> String {
    let mut fenced = false;
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Link targets written `[text](target)`, web addresses left out.
fn links(text: &str) -> Vec<String> {
    let prose = prose(text);
    let mut out = Vec::new();
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let end = rest.find(')').unwrap_or(rest.len());
        let target = &rest[..end];
        if !target.contains("://") && !target.starts_with("mailto:") && !target.contains(' ') {
            out.push(target.to_owned());
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    prose(text)
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| slug(l.trim_start_matches('#')))
        .collect()
}

fn documents() -> Vec<PathBuf> {
    let mut docs = vec![
        repo_path("README.md"),
        repo_path("helm/q-a2a-gateway/README.md"),
    ];
    for entry in std::fs::read_dir(repo_path("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            docs.push(path);
        }
    }
    docs
}

#[test]
fn the_readme_is_short_and_links_to_every_moved_document() {
    let readme = read(&repo_path("README.md"));
    let lines = readme.lines().count();
    assert!(lines < 200, "README.md has {lines} lines");
    let targets: BTreeSet<String> = links(&readme)
        .into_iter()
        .map(|t| t.split('#').next().unwrap().to_owned())
        .collect();
    for doc in MOVED {
        assert!(targets.contains(*doc), "README.md does not link to {doc}");
    }
}

#[test]
fn every_relative_link_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = read(&doc);
        for target in links(&text) {
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (target.as_str(), None),
            };
            let path = if file.is_empty() {
                doc.clone()
            } else {
                doc.parent().unwrap().join(file)
            };
            checked += 1;
            if !path.exists() {
                broken.push(format!("{}: {target} (no such file)", doc.display()));
                continue;
            }
            if let Some(anchor) = anchor.filter(|_| path.extension().is_some_and(|e| e == "md")) {
                if !anchors(&read(&path)).contains(anchor) {
                    broken.push(format!("{}: {target} (no such heading)", doc.display()));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the parser broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn slugs_follow_github() {
    assert_eq!(
        slug("Rotating the credential key"),
        "rotating-the-credential-key"
    );
    assert_eq!(slug("`GET /internal/v1/health`"), "get-internalv1health");
    assert_eq!(
        slug("Which answers are definite"),
        "which-answers-are-definite"
    );
    assert_eq!(
        links("a [x](docs/a.md#b) [y](https://e.x)\n```\n[z](c.md)\n```\n"),
        ["docs/a.md#b"]
    );
}
