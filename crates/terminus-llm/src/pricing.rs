//! Prices per token of common models, for `cost_usd` when a provider does not report cost.
//! Unknown models cost 0 (and results then show no cost rather than a wrong one).

/// (input $/token, output $/token, cached input $/token) for a model name without provider prefix.
pub fn price_per_token(model: &str) -> Option<(f64, f64, f64)> {
    let model = model.rsplit('/').next().unwrap_or(model);
    let table: &[(&str, (f64, f64, f64))] = &[
        ("gpt-4o-mini", (1.5e-7, 6e-7, 7.5e-8)),
        ("gpt-4o", (2.5e-6, 1e-5, 1.25e-6)),
        ("gpt-4.1-mini", (4e-7, 1.6e-6, 1e-7)),
        ("gpt-4.1", (2e-6, 8e-6, 5e-7)),
        ("o3-mini", (1.1e-6, 4.4e-6, 5.5e-7)),
        ("o4-mini", (1.1e-6, 4.4e-6, 2.75e-7)),
    ];
    // Longest prefix first, so `gpt-4o-mini` is not priced as `gpt-4o`.
    table
        .iter()
        .filter(|(name, _)| model == *name || model.starts_with(&format!("{name}-")))
        .max_by_key(|(name, _)| name.len())
        .map(|(_, p)| *p)
}

/// Cost of one call. Cached prompt tokens are priced at the cache rate.
pub fn cost(model: &str, prompt_tokens: u64, completion_tokens: u64, cache_tokens: u64) -> f64 {
    match price_per_token(model) {
        Some((input, output, cached)) => {
            let uncached = prompt_tokens.saturating_sub(cache_tokens);
            uncached as f64 * input + cache_tokens as f64 * cached + completion_tokens as f64 * output
        }
        None => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt_4o_matches_the_reference_goldens() {
        // 682 prompt + 100 completion tokens cost 0.002705 in the reference's golden trajectory.
        assert!((cost("openai/gpt-4o", 682, 100, 0) - 0.002705).abs() < 1e-12);
        assert!(price_per_token("gpt-4o-mini").unwrap().0 < price_per_token("gpt-4o").unwrap().0);
        assert_eq!(cost("mystery-model", 10, 10, 0), 0.0);
    }
}
