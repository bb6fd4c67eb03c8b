//! Which version of a dataset a name without `@VERSION` means, as Harbor resolves it: `head`
//! when there is one, else the highest version by PEP 440's ordering, else (no version parses)
//! the lexically last.

use std::cmp::Ordering;
use std::sync::LazyLock;

use regex::Regex;

/// The best of `versions`: `head`, the highest PEP 440 version, or the lexically last.
pub fn resolve_version<'a>(versions: &[&'a str]) -> Option<&'a str> {
    if versions.contains(&"head") {
        return Some("head");
    }
    let parsed = versions.iter().filter_map(|v| Pep440::parse(v).map(|p| (p, *v))).max_by(|a, b| a.0.cmp(&b.0));
    match parsed {
        Some((_, version)) => Some(version),
        None => versions.iter().max().copied(),
    }
}

/// PEP 440's canonical pattern (as Python's `packaging` writes it), case-insensitive.
static PATTERN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?ix)^\s*v?
        (?:(?P<epoch>[0-9]+)!)?
        (?P<release>[0-9]+(?:\.[0-9]+)*)
        (?:[-_.]?(?P<pre_l>alpha|a|beta|b|preview|pre|c|rc)[-_.]?(?P<pre_n>[0-9]+)?)?
        (?:-(?P<post_n1>[0-9]+)|[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>[0-9]+)?)?
        (?:[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>[0-9]+)?)?
        (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?
        \s*$",
    )
    .expect("the PEP 440 pattern compiles")
});

/// The pre-release part of the sort key: a development release of a final version sorts before
/// its pre-releases, a final release after them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Pre {
    BeforeAll,
    /// (0: alpha, 1: beta, 2: release candidate; number)
    Release(u8, u64),
    Final,
}

/// A local segment: numbers sort after words.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum LocalPart {
    Word(String),
    Number(u64),
}

/// A PEP 440 version as its sort key (Python's `packaging.version._cmpkey`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Pep440 {
    epoch: u64,
    /// Trailing zeros dropped: 1.0 == 1.0.0.
    release: Vec<u64>,
    pre: Pre,
    /// None (no post-release) sorts first.
    post: Option<u64>,
    /// None (not a development release) sorts last.
    dev: DevKey,
    /// None (no local part) sorts first.
    local: Option<Vec<LocalPart>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct DevKey(Option<u64>);

impl PartialOrd for DevKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for DevKey {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self.0, other.0) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Greater,
            (Some(_), None) => Ordering::Less,
            (Some(a), Some(b)) => a.cmp(&b),
        }
    }
}

impl Pep440 {
    fn parse(text: &str) -> Option<Pep440> {
        let caps = PATTERN.captures(text)?;
        let number = |name: &str| caps.name(name).map(|m| m.as_str().parse::<u64>().ok()).unwrap_or(Some(0));
        let mut release = caps["release"].split('.').map(|n| n.parse().ok()).collect::<Option<Vec<u64>>>()?;
        while release.len() > 1 && release.last() == Some(&0) {
            release.pop();
        }
        let pre_letter = caps.name("pre_l").map(|m| match m.as_str().to_ascii_lowercase().as_str() {
            "alpha" | "a" => 0,
            "beta" | "b" => 1,
            _ => 2,
        });
        let post = match (caps.name("post_n1"), caps.name("post_l")) {
            (Some(n), _) => Some(n.as_str().parse().ok()?),
            (None, Some(_)) => Some(number("post_n2")?),
            (None, None) => None,
        };
        let dev = DevKey(match caps.name("dev_l") {
            Some(_) => Some(number("dev_n")?),
            None => None,
        });
        let pre = match pre_letter {
            Some(letter) => Pre::Release(letter, number("pre_n")?),
            None if post.is_none() && dev.0.is_some() => Pre::BeforeAll,
            None => Pre::Final,
        };
        let local = caps.name("local").map(|m| {
            m.as_str()
                .split(['-', '_', '.'])
                .map(|part| match part.parse() {
                    Ok(n) => LocalPart::Number(n),
                    Err(_) => LocalPart::Word(part.to_ascii_lowercase()),
                })
                .collect()
        });
        Some(Pep440 { epoch: number("epoch")?, release, pre, post, dev, local })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_wins_then_the_highest_version_then_the_lexically_last() {
        assert_eq!(resolve_version(&["1.0", "head", "2.0"]), Some("head"));
        assert_eq!(resolve_version(&["1.10", "1.9", "1.2"]), Some("1.10"), "numeric, not lexical");
        assert_eq!(resolve_version(&["2.0", "2.0rc1", "1.5"]), Some("2.0"), "a final release after its candidates");
        assert_eq!(resolve_version(&["draft", "2.0", "zzz"]), Some("2.0"), "any version beats names");
        assert_eq!(resolve_version(&["alpha-set", "beta-set"]), Some("beta-set"));
        assert_eq!(resolve_version(&[]), None);
    }

    #[test]
    fn versions_order_as_pep_440_orders_them() {
        let ordered = [
            "1.0.dev1",
            "1.0a1",
            "1.0a2.dev1",
            "1.0a2",
            "1.0b1",
            "1.0rc1",
            "1.0",
            "1.0+abc",
            "1.0+5",
            "1.0.post1.dev1",
            "1.0.post1",
            "1.1",
            "v2",
            "1!0.1",
        ];
        let keys: Vec<Pep440> = ordered.iter().map(|v| Pep440::parse(v).unwrap_or_else(|| panic!("{v}"))).collect();
        for pair in keys.windows(2) {
            assert!(pair[0] < pair[1], "{pair:?}");
        }
        assert_eq!(Pep440::parse("1.0"), Pep440::parse("1.0.0"));
        assert_eq!(Pep440::parse("1.0-1"), Pep440::parse("1.0.post1"));
        assert_eq!(Pep440::parse("1.0alpha"), Pep440::parse("1.0a0"));
        assert!(Pep440::parse("head").is_none() && Pep440::parse("1.0-final").is_none());
    }
}
