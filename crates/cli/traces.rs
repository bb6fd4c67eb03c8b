//! `terminus traces export`: a job's trajectories as the rows of a HuggingFace dataset, built
//! as Harbor 0.26's exporter builds them (`rows.rs`, Python's text of values in `text.rs`),
//! written as JSON Lines whole or not at all.

mod rows;
mod text;

use std::io::Write;

use rows::ExportOptions;

use crate::args::{TraceEpisodes, TraceFilter, TraceFormat, TracesExportArgs};
use crate::exit::{self, invalid};

pub fn export(args: TracesExportArgs) -> u8 {
    let Some(root) = args.dir.clone().or(args.path.clone()) else { return invalid("give a directory") };
    if args.format == TraceFormat::Otel {
        return invalid("--format otel (OpenTelemetry spans) is not built: export --format hf");
    }
    if !root.is_dir() {
        return invalid(format!("`{}` is not a directory", root.display()));
    }
    let options = ExportOptions {
        recursive: !args.no_recursive,
        last_episode_only: args.episodes == TraceEpisodes::Last,
        sharegpt: args.sharegpt,
        success: match args.filter {
            TraceFilter::All => None,
            TraceFilter::Success => Some(true),
            TraceFilter::Failure => Some(false),
        },
        subagents: !args.no_subagents,
        instruction: args.instruction_metadata,
        verifier_output: args.verifier_metadata,
    };
    let export = match rows::export(&root, &options) {
        Ok(export) => export,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::TRIAL_ERRORS;
        }
    };
    eprintln!("found {} trial directories under {}", export.n_trials, root.display());
    if args.verbose {
        for (trial, why) in &export.skipped {
            eprintln!("skipped {}: {why}", trial.display());
        }
    }
    let mut text = Vec::new();
    for row in &export.rows {
        if serde_json::to_writer(&mut text, row).is_err() || text.write_all(b"\n").is_err() {
            return invalid("a row could not be written as JSON");
        }
    }
    let tmp = args.output.with_file_name(format!(
        ".{}.{}",
        args.output.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        std::process::id()
    ));
    if let Err(e) = std::fs::write(&tmp, &text).and_then(|()| std::fs::rename(&tmp, &args.output)) {
        let _ = std::fs::remove_file(&tmp);
        return invalid(format!("cannot write `{}`: {e}", args.output.display()));
    }
    let sources: std::collections::BTreeSet<&str> =
        export.rows.iter().filter_map(|r| r.get("trace_source").and_then(|s| s.as_str())).collect();
    let from = if sources.is_empty() {
        String::new()
    } else {
        format!(" ({})", sources.into_iter().collect::<Vec<_>>().join(", "))
    };
    println!("exported {} rows{from} from {} to {}", export.rows.len(), root.display(), args.output.display());
    exit::OK
}

#[cfg(test)]
mod tests;
