//! Shell-style glob matching (`*`, `?`, `[abc]`) for task-name filters, as Python's `fnmatch`
//! does it for Harbor's `task_names` / `exclude_task_names`.

/// Whether `name` matches `pattern` as a whole.
pub fn matches(pattern: &str, name: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let name: Vec<char> = name.chars().collect();
    match_from(&pattern, &name)
}

fn match_from(pattern: &[char], name: &[char]) -> bool {
    match pattern.first() {
        None => name.is_empty(),
        Some('*') => (0..=name.len()).any(|skip| match_from(&pattern[1..], &name[skip..])),
        Some('?') => !name.is_empty() && match_from(&pattern[1..], &name[1..]),
        Some('[') => {
            let Some(close) = pattern.iter().skip(1).position(|c| *c == ']').map(|p| p + 1) else {
                return name.first() == Some(&'[') && match_from(&pattern[1..], &name[1..]);
            };
            let Some(first) = name.first() else {
                return false;
            };
            let set = &pattern[1..close];
            let (negate, set) = match set.first() {
                Some('!') => (true, &set[1..]),
                _ => (false, set),
            };
            let mut hit = false;
            let mut i = 0;
            while i < set.len() {
                if i + 2 < set.len() && set[i + 1] == '-' {
                    hit |= set[i] <= *first && *first <= set[i + 2];
                    i += 3;
                } else {
                    hit |= set[i] == *first;
                    i += 1;
                }
            }
            hit != negate && match_from(&pattern[close + 1..], &name[1..])
        }
        Some(c) => name.first() == Some(c) && match_from(&pattern[1..], &name[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn globs_behave_like_fnmatch() {
        assert!(matches("hello-*", "hello-world"));
        assert!(matches("*", ""));
        assert!(matches("h?llo", "hello"));
        assert!(!matches("h?llo", "hllo"));
        assert!(matches("[a-c]at", "bat"));
        assert!(!matches("[!a-c]at", "bat"));
        assert!(!matches("hello", "hello-world"));
    }
}
