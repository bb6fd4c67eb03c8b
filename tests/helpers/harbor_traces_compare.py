"""Compares terminus's trace export with Harbor 0.26's, on the same job directory.

Run with the python of tests/helpers/harbor_traces.sh:
  harbor_traces_compare.py JOB_DIR OURS.jsonl [harbor export flags as JSON]
The flags are export_traces' keyword arguments (to_sharegpt, episodes, success_filter,
export_subagents, include_instruction, include_verifier_output). Ours is loaded with
`datasets.load_dataset("json", ...)`; both tables must have the same columns, in order, and the
same rows (compared in a fixed order: Harbor's follows the directory walk). Prints the number of
rows; exits 1 naming the first difference.
"""

import json
import os
import sys
import tempfile


def key(row):
    return (str(row.get("trace_source")), str(row.get("trial_name")), str(row.get("episode")))


def main():
    job_dir, ours_path = sys.argv[1], sys.argv[2]
    flags = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    os.environ.setdefault("HF_HOME", tempfile.mkdtemp(prefix="hf-home-"))
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    import datasets
    from harbor.utils.traces_utils import export_traces

    theirs = export_traces(root=job_dir, use_rich_progress=False, **flags)
    ours = datasets.load_dataset("json", data_files=ours_path, split="train")
    if theirs.column_names != ours.column_names:
        print(f"columns differ:\n harbor:   {theirs.column_names}\n terminus: {ours.column_names}")
        sys.exit(1)
    theirs_rows = sorted(theirs.to_list(), key=key)
    ours_rows = sorted(ours.to_list(), key=key)
    if len(theirs_rows) != len(ours_rows):
        print(f"harbor has {len(theirs_rows)} rows, terminus {len(ours_rows)}")
        sys.exit(1)
    for theirs_row, ours_row in zip(theirs_rows, ours_rows):
        for column in theirs.column_names:
            if theirs_row[column] != ours_row[column]:
                print(f"row {key(theirs_row)}, column {column}:")
                print(f" harbor:   {json.dumps(theirs_row[column], default=str)[:3000]}")
                print(f" terminus: {json.dumps(ours_row[column], default=str)[:3000]}")
                sys.exit(1)
    print(len(ours_rows))


main()
