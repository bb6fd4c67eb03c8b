//! `POST /query`: read-only SQL over the public views, with Harbor 0.26's limits.
//!
//! What keeps a query read-only and inside its owner's rows, each on its own:
//! a read-only connection with `query_only`; an authorizer that allows reading the public views
//! (and the internal tables only from inside them), a list of functions, and nothing else; a
//! text check that refuses any statement naming the internal tables; native limits; a progress
//! handler that stops a batch after its deadline; row, value and response size limits.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::limits::Limit;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use serde_json::{Map, Value, json};

use crate::store::OWNER;

pub const PUBLIC_VIEWS: [&str; 6] =
    ["job", "rollout", "rollout_reward", "rollout_step", "rollout_error", "rollout_artifact"];

pub const MAX_STATEMENTS: usize = 16;
const MAX_SQL_BYTES: usize = 64 * 1024;
const MAX_ROWS: usize = 10_000;
const MAX_VALUE_BYTES: i32 = 1024 * 1024;
const MAX_RESPONSE_BYTES: usize = 10 * 1024 * 1024;
const DEADLINE: Duration = Duration::from_secs(5);

const FUNCTIONS: &[&str] = &[
    "abs",
    "avg",
    "ceil",
    "ceiling",
    "char",
    "coalesce",
    "concat",
    "concat_ws",
    "count",
    "current_date",
    "current_time",
    "current_timestamp",
    "date",
    "datetime",
    "exp",
    "floor",
    "format",
    "glob",
    "group_concat",
    "hex",
    "if",
    "ifnull",
    "iif",
    "instr",
    "json",
    "json_array",
    "json_array_length",
    "json_error_position",
    "json_extract",
    "json_group_array",
    "json_group_object",
    "json_insert",
    "json_object",
    "json_patch",
    "json_pretty",
    "json_quote",
    "json_remove",
    "json_replace",
    "json_set",
    "json_type",
    "json_valid",
    "julianday",
    "lag",
    "last_value",
    "lead",
    "length",
    "like",
    "likelihood",
    "likely",
    "ln",
    "log",
    "log10",
    "log2",
    "lower",
    "ltrim",
    "max",
    "min",
    "mod",
    "nth_value",
    "ntile",
    "nullif",
    "percent_rank",
    "pow",
    "power",
    "quote",
    "random",
    "rank",
    "replace",
    "round",
    "row_number",
    "rtrim",
    "sign",
    "sqrt",
    "strftime",
    "string_agg",
    "substr",
    "substring",
    "sum",
    "time",
    "timediff",
    "total",
    "trim",
    "trunc",
    "typeof",
    "unhex",
    "unicode",
    "unixepoch",
    "unlikely",
    "upper",
    "dense_rank",
    "cume_dist",
    "first_value",
    "octet_length",
];

/// One statement of a batch: its SQL and its parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct Statement {
    pub sql: String,
    pub params: Params,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Params {
    Positional(Vec<Value>),
    Named(Map<String, Value>),
}

/// Reads a request body as Harbor's `QueryRequest`; the error names what is wrong.
pub fn parse_batch(body: &Value) -> Result<Vec<Statement>, String> {
    let Value::Array(items) = body else { return Err("body: Input should be a valid list".into()) };
    if items.is_empty() || items.len() > MAX_STATEMENTS {
        return Err(format!("body: a batch holds 1 to {MAX_STATEMENTS} statements, not {}", items.len()));
    }
    items.iter().map(parse_statement).collect()
}

fn parse_statement(item: &Value) -> Result<Statement, String> {
    let scalar = |v: &Value| matches!(v, Value::String(_) | Value::Number(_) | Value::Null);
    match item {
        Value::String(sql) => Ok(Statement { sql: sql.clone(), params: Params::Positional(Vec::new()) }),
        Value::Array(parts) => {
            let Some(Value::String(sql)) = parts.first() else {
                return Err("body: Value error, Each statement must start with SQL text.".into());
            };
            let rest = &parts[1..];
            match rest {
                [Value::Object(named)] if named.values().all(scalar) => {
                    Ok(Statement { sql: sql.clone(), params: Params::Named(named.clone()) })
                }
                _ if rest.iter().all(scalar) => {
                    Ok(Statement { sql: sql.clone(), params: Params::Positional(rest.to_vec()) })
                }
                _ => {
                    Err("body: Value error, Use either positional scalar parameters or one named-parameter object."
                        .into())
                }
            }
        }
        _ => Err("body: Value error, Each statement must start with SQL text.".into()),
    }
}

/// Runs a batch in one read snapshot; one result per statement (`{"rows": …}` or
/// `{"error_v2": …}`), in order.
pub fn run(db: &Path, batch: &[Statement]) -> Result<Vec<Value>, rusqlite::Error> {
    let conn = open(db)?;
    conn.execute_batch("BEGIN")?;
    // The snapshot starts before the authorizer is installed (the trusted read).
    conn.query_row("SELECT count(*) FROM (SELECT 1 FROM internal_job LIMIT 1)", [], |_| Ok(()))?;
    conn.authorizer(Some(authorize));
    let deadline = Instant::now() + DEADLINE;
    let expired = Arc::new(AtomicBool::new(false));
    let flag = expired.clone();
    conn.progress_handler(
        1000,
        Some(move || {
            let over = Instant::now() > deadline;
            if over {
                flag.store(true, Ordering::Relaxed);
            }
            over
        }),
    );
    let mut budget = MAX_RESPONSE_BYTES;
    let mut results = Vec::with_capacity(batch.len());
    for statement in batch {
        if expired.load(Ordering::Relaxed) || Instant::now() > deadline {
            results.push(error("Query batch exceeded its execution deadline.", None));
            continue;
        }
        results.push(match one(&conn, statement, &mut budget) {
            Ok(rows) => json!({ "rows": rows }),
            Err(Failure::Message(message)) => error(&message, None),
            Err(Failure::Sqlite(e)) => sqlite_error(&e),
        });
    }
    conn.authorizer(None::<fn(AuthContext<'_>) -> Authorization>);
    conn.progress_handler(0, None::<fn() -> bool>);
    let _ = conn.execute_batch("ROLLBACK");
    Ok(results)
}

/// The public views and their columns (`GET /query/schema`).
pub fn schema(db: &Path, view: Option<&str>) -> Result<Value, rusqlite::Error> {
    let conn = open(db)?;
    let mut views = Vec::new();
    for name in PUBLIC_VIEWS.iter().filter(|v| view.is_none_or(|w| w == **v)) {
        let mut stmt = conn.prepare("SELECT name, type FROM pragma_table_xinfo(?1)")?;
        let columns = stmt.query_map([name], |r| {
            let kind: String = r.get(1)?;
            Ok(json!({ "name": r.get::<_, String>(0)?, "type": if kind.is_empty() { Value::Null } else { Value::String(kind) } }))
        })?;
        views.push(json!({ "name": name, "columns": columns.collect::<Result<Vec<_>, _>>()? }));
    }
    Ok(json!({ "views": views }))
}

fn open(db: &Path) -> Result<Connection, rusqlite::Error> {
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
    conn.busy_timeout(Duration::from_secs(1))?;
    conn.pragma_update(None, "query_only", true)?;
    conn.create_scalar_function("current_owner_id", 0, rusqlite::functions::FunctionFlags::SQLITE_UTF8, |_| {
        Ok(OWNER.to_string())
    })?;
    for (limit, value) in [
        (Limit::SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES),
        (Limit::SQLITE_LIMIT_SQL_LENGTH, MAX_SQL_BYTES as i32),
        (Limit::SQLITE_LIMIT_COLUMN, 100),
        (Limit::SQLITE_LIMIT_EXPR_DEPTH, 100),
        (Limit::SQLITE_LIMIT_COMPOUND_SELECT, 32),
        (Limit::SQLITE_LIMIT_VDBE_OP, 100_000),
        (Limit::SQLITE_LIMIT_FUNCTION_ARG, 32),
        (Limit::SQLITE_LIMIT_ATTACHED, 0),
        (Limit::SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 500),
        (Limit::SQLITE_LIMIT_VARIABLE_NUMBER, 1000),
    ] {
        conn.set_limit(limit, value)?;
    }
    Ok(conn)
}

fn authorize(ctx: AuthContext<'_>) -> Authorization {
    let inside_view = ctx.accessor.is_some_and(|v| PUBLIC_VIEWS.contains(&v));
    let allowed = match ctx.action {
        AuthAction::Select | AuthAction::Recursive => true,
        AuthAction::Read { table_name, .. } => {
            // A CTE's or subquery's columns belong to no database: what they read was
            // authorized itself.
            table_name.is_empty()
                || ctx.database_name.is_none()
                || (ctx.database_name == Some("main")
                    && (PUBLIC_VIEWS.contains(&table_name)
                        || table_name == "json_each"
                        || table_name == "json_tree"
                        || inside_view))
        }
        AuthAction::Function { function_name } => {
            let name = function_name.to_ascii_lowercase();
            FUNCTIONS.contains(&name.as_str()) || (name == "current_owner_id" && ctx.accessor == Some("job"))
        }
        _ => false,
    };
    if allowed { Authorization::Allow } else { Authorization::Deny }
}

enum Failure {
    Message(String),
    Sqlite(rusqlite::Error),
}

impl From<rusqlite::Error> for Failure {
    fn from(e: rusqlite::Error) -> Failure {
        match e {
            rusqlite::Error::MultipleStatement => {
                Failure::Message("You can only execute one statement at a time.".into())
            }
            other => Failure::Sqlite(other),
        }
    }
}

fn one(conn: &Connection, statement: &Statement, budget: &mut usize) -> Result<Vec<Value>, Failure> {
    if statement.sql.len() > MAX_SQL_BYTES {
        return Err(Failure::Message("SQL statement is too large.".into()));
    }
    if statement.sql.to_lowercase().contains("internal_") {
        return Err(Failure::Message(
            "The internal_ namespace is reserved; use public views and bind literal values as parameters.".into(),
        ));
    }
    if statement.sql.trim().is_empty() {
        return Err(Failure::Message("A row-producing SELECT is required.".into()));
    }
    let mut stmt = conn.prepare(&statement.sql)?;
    if stmt.column_count() == 0 || !stmt.readonly() {
        return Err(Failure::Message("A row-producing SELECT is required.".into()));
    }
    let names: Vec<String> = stmt.column_names().iter().map(|n| n.to_string()).collect();
    let mut seen = std::collections::HashSet::new();
    if !names.iter().all(|n| seen.insert(n.as_str())) {
        return Err(Failure::Message("Output column names must be unique; use aliases.".into()));
    }
    bind(&mut stmt, &statement.params)?;
    let mut rows = stmt.raw_query();
    let mut out = Vec::new();
    let mut used = 32usize;
    while let Some(row) = rows.next()? {
        if out.len() == MAX_ROWS {
            return Err(Failure::Message("Query row limit exceeded; add LIMIT or use SQL keyset pagination.".into()));
        }
        let mut object = Map::new();
        for (i, name) in names.iter().enumerate() {
            let value = match row.get_ref(i)? {
                ValueRef::Null => Value::Null,
                ValueRef::Integer(n) => Value::from(n),
                ValueRef::Real(x) if x.is_finite() => Value::from(x),
                ValueRef::Text(t) => Value::String(String::from_utf8_lossy(t).into_owned()),
                ValueRef::Real(_) | ValueRef::Blob(_) => {
                    return Err(Failure::Message(
                        "Results must be finite JSON scalars; encode BLOB values with hex().".into(),
                    ));
                }
            };
            object.insert(name.clone(), value);
        }
        let row = Value::Object(object);
        used += row.to_string().len() + 1;
        if used > *budget {
            return Err(Failure::Message("Query batch response limit exceeded.".into()));
        }
        out.push(row);
    }
    *budget -= used;
    Ok(out)
}

fn bind(stmt: &mut rusqlite::Statement<'_>, params: &Params) -> Result<(), Failure> {
    let expected = stmt.parameter_count();
    let given = match params {
        Params::Positional(values) => values.len(),
        Params::Named(map) => map.len(),
    };
    if expected != given {
        return Err(Failure::Message(format!(
            "Incorrect number of bindings supplied. The current statement uses {expected}, and there are {given} supplied."
        )));
    }
    let sql_value = |v: &Value| -> rusqlite::types::Value {
        match v {
            Value::String(s) => rusqlite::types::Value::Text(s.clone()),
            Value::Number(n) => match n.as_i64() {
                Some(i) => rusqlite::types::Value::Integer(i),
                None => rusqlite::types::Value::Real(n.as_f64().unwrap_or(f64::NAN)),
            },
            _ => rusqlite::types::Value::Null,
        }
    };
    match params {
        Params::Positional(values) => {
            for (i, value) in values.iter().enumerate() {
                stmt.raw_bind_parameter(i + 1, sql_value(value))?;
            }
        }
        Params::Named(map) => {
            for (name, value) in map {
                let index =
                    [":", "@", "$"].iter().find_map(|p| stmt.parameter_index(&format!("{p}{name}")).ok().flatten());
                let Some(index) = index else {
                    return Err(Failure::Message(format!("You did not supply a value for binding parameter :{name}.")));
                };
                stmt.raw_bind_parameter(index, sql_value(value))?;
            }
        }
    }
    Ok(())
}

fn error(message: &str, sqlite: Option<(i32, i32)>) -> Value {
    let mut inner = json!({ "message": message });
    if let Some((code, extended)) = sqlite {
        inner["sqlite"] = json!({ "code": code, "extended_code": extended });
    }
    json!({ "error_v2": inner })
}

fn sqlite_error(e: &rusqlite::Error) -> Value {
    match e {
        rusqlite::Error::SqliteFailure(code, message) => {
            let extended = code.extended_code;
            let text = message.clone().unwrap_or_else(|| code.to_string());
            error(&text, Some((extended & 255, extended)))
        }
        other => error(&other.to_string(), None),
    }
}

#[cfg(test)]
mod tests;
