//! A request body as it goes on the wire, and the `debug.json` record made from it.
//!
//! A long trial's request holds its whole history, so what each call does with the messages is
//! what each call costs. The body borrows the messages (no copy into a `serde_json::Value`), is
//! serialised once for the wire, and the debug record is written from the same borrowed body,
//! redacted field by field, in the model call's task (not on the trial's actor). Its text is the
//! one `redact_json` + `to_string_pretty` of the body as a `Value` gives (a test compares them).

use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;
use terminus_core::secrets::{redact_field, redact_json};

use terminus_core::llm::{ChatMessage, LoggedPrefix};

/// One top-level field of a body.
#[derive(Debug)]
pub(crate) enum Field<'a> {
    /// The messages; the last `.1` of them are sent as one text block with an ephemeral cache
    /// breakpoint (Anthropic prompt caching through an OpenAI-compatible route).
    Messages(&'a [ChatMessage], usize),
    Json(Value),
}

/// The fields in order. Setting a field that is there already replaces its value in place (as
/// inserting into an order-keeping JSON map does), so `extra` keys can override built-in ones.
#[derive(Debug, Default)]
pub(crate) struct Body<'a> {
    fields: Vec<(String, Field<'a>)>,
}

impl<'a> Body<'a> {
    pub(crate) fn set(&mut self, key: &str, field: Field<'a>) {
        match self.fields.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = field,
            None => self.fields.push((key.to_string(), field)),
        }
    }

    pub(crate) fn set_json(&mut self, key: &str, value: Value) {
        self.set(key, Field::Json(value));
    }

    pub(crate) fn remove(&mut self, key: &str) {
        self.fields.retain(|(k, _)| k != key);
    }

    pub(crate) fn has(&self, key: &str) -> bool {
        self.fields.iter().any(|(k, _)| k == key)
    }

    /// The compact bytes sent.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// As a JSON value (tests read fields this way).
    #[cfg(test)]
    pub(crate) fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.fields.len()))?;
        for (key, field) in &self.fields {
            match field {
                Field::Messages(messages, cached) => {
                    map.serialize_entry(key, &WireMessages { messages, cached: *cached, redact: false })?
                }
                Field::Json(value) => map.serialize_entry(key, value)?,
            }
        }
        map.end()
    }
}

/// The body with every string redacted as `redact_json` would; the first messages left out
/// when an earlier record holds them (`messages_logged` names it).
struct Redacted<'b, 'a>(&'b Body<'a>, Option<&'b LoggedPrefix>);

/// A value stored under `key`, redacted as `redact_json` would redact it in its object.
fn redacted_value(key: &str, value: &Value) -> Value {
    match value {
        Value::String(text) => Value::String(redact_field(key, text).into_owned()),
        other => {
            let mut copy = other.clone();
            redact_json(&mut copy);
            copy
        }
    }
}

impl Serialize for Redacted<'_, '_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (key, field) in &self.0.fields {
            match field {
                Field::Messages(messages, cached) => {
                    let skip = self.1.map_or(0, |p| p.n_messages.min(messages.len()));
                    if let Some(prefix) = self.1.filter(|_| skip > 0) {
                        map.serialize_entry(
                            "messages_logged",
                            &serde_json::json!({"file": prefix.file, "n_messages": skip}),
                        )?;
                    }
                    map.serialize_entry(
                        key,
                        &WireMessages { messages: &messages[skip..], cached: *cached, redact: true },
                    )?
                }
                Field::Json(value) => map.serialize_entry(key, &redacted_value(key, value))?,
            }
        }
        map.end()
    }
}

/// Messages as sent (or as `debug.json` records them, redacted): the fields of
/// `ChatMessage`'s own serialisation in its order, the content of the last `cached` as a text
/// block with a cache breakpoint.
struct WireMessages<'a> {
    messages: &'a [ChatMessage],
    cached: usize,
    redact: bool,
}

struct WireMessage<'a> {
    message: &'a ChatMessage,
    cached: bool,
    redact: bool,
}

impl Serialize for WireMessages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.messages.len()))?;
        let first_cached = self.messages.len().saturating_sub(self.cached);
        for (n, message) in self.messages.iter().enumerate() {
            seq.serialize_element(&WireMessage { message, cached: n >= first_cached, redact: self.redact })?;
        }
        seq.end()
    }
}

impl<'a> Serialize for WireMessage<'a> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let m: &'a ChatMessage = self.message;
        let redact = self.redact;
        let text = |key: &str, value: &'a str| -> std::borrow::Cow<'a, str> {
            if redact { redact_field(key, value) } else { std::borrow::Cow::Borrowed(value) }
        };
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("role", &text("role", &m.role))?;
        if self.cached {
            let block = serde_json::json!([{
                "type": "text",
                "text": text("content", &m.content),
                "cache_control": {"type": "ephemeral"},
            }]);
            map.serialize_entry("content", &block)?;
        } else {
            map.serialize_entry("content", &text("content", &m.content))?;
        }
        if let Some(reasoning) = &m.reasoning_content {
            map.serialize_entry("reasoning_content", &text("reasoning_content", reasoning))?;
        }
        map.end()
    }
}

/// The key of a request's extra fields that holds HTTP headers (LiteLLM's `extra_headers`
/// kwarg), never sent as a body field.
pub(crate) const EXTRA_HEADERS: &str = "extra_headers";

/// `builder` with the `extra_headers` of `extra` set; a name or value HTTP cannot carry is left
/// out with a warning (the job's checks refuse such names first).
pub(crate) fn with_extra_headers(
    mut builder: reqwest::RequestBuilder,
    extra: &serde_json::Map<String, Value>,
) -> reqwest::RequestBuilder {
    let Some(headers) = extra.get(EXTRA_HEADERS).and_then(Value::as_object) else { return builder };
    for (name, value) in headers {
        let text = match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        match (reqwest::header::HeaderName::from_bytes(name.as_bytes()), reqwest::header::HeaderValue::from_str(&text))
        {
            (Ok(name), Ok(value)) => builder = builder.header(name, value),
            _ => tracing::warn!(header = %name, "extra_headers: not a valid HTTP header; not sent"),
        }
    }
    builder
}

/// `debug.json` for a body sent to `api_base` and its reply.
pub(crate) fn debug_record(api_base: &str, body: &Body<'_>, logged: Option<&LoggedPrefix>, mut reply: Value) -> String {
    redact_json(&mut reply);
    let api_base = redact_field("api_base", api_base);
    serde_json::to_string_pretty(&Record { api_base: &api_base, request: Redacted(body, logged), response: &reply })
        .unwrap_or_default()
}

/// `debug.json` for a body built as a `Value` (the Anthropic protocol's, whose `messages` leave
/// out the system prompt: `skip` counts in them).
pub(crate) fn debug_record_of_value(
    api_base: &str,
    mut body: Value,
    logged: Option<(&LoggedPrefix, usize)>,
    reply: Value,
) -> String {
    if let (Some((prefix, skip)), Some(Value::Object(map))) = (logged.filter(|(_, skip)| *skip > 0), Some(&mut body))
        && let Some(Value::Array(messages)) = map.get_mut("messages")
    {
        let skip = skip.min(messages.len());
        messages.drain(..skip);
        map.insert("messages_logged".into(), serde_json::json!({"file": prefix.file, "n_messages": skip}));
    }
    let mut record = serde_json::json!({"api_base": api_base, "request": body, "response": reply});
    redact_json(&mut record);
    serde_json::to_string_pretty(&record).unwrap_or_default()
}

#[derive(Serialize)]
struct Record<'r, 'b, 'a> {
    api_base: &'r str,
    request: Redacted<'b, 'a>,
    response: &'r Value,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The record is the text the whole-`Value` path gives, secrets and URL credentials included.
    #[test]
    fn the_record_is_the_redacted_pretty_value() {
        let messages = vec![
            ChatMessage::new("system", "be brief"),
            ChatMessage::user("see https://me:hunter2@host.example/x?token=abcdefghijklmnopqrst and \"quotes\"\n\tü"),
            ChatMessage { reasoning_content: Some("thought".into()), ..ChatMessage::assistant("{\"analysis\": 1}") },
        ];
        let mut body = Body::default();
        body.set_json("model", json!("gpt-4o"));
        body.set("messages", Field::Messages(&messages, 0));
        body.set_json("temperature", json!(0.7));
        body.set_json("api_key", json!("sk-abcdefghijklmnopqrstuvwxyz"));
        body.set_json("metadata", json!({"auth_token": "0123456789abcdefghij", "n": [1, 2.5]}));
        body.set_json("temperature", json!(0.2));
        let reply = json!({"choices": [{"message": {"content": "ok"}}], "x_secret": "abcdefghijklmnopqrstuvwxyz"});
        let base = "https://user:pw@proxy.example/v1";

        let fast = debug_record(base, &body, None, reply.clone());
        let slow = debug_record_of_value(base, body.to_value(), None, reply.clone());
        assert_eq!(fast, slow);
        assert!(!fast.contains("hunter2") && !fast.contains("sk-abc") && !fast.contains(":pw@"), "{fast}");
        let value: Value = serde_json::from_str(&fast).unwrap();
        assert_eq!(value["request"]["temperature"], 0.2, "a later field replaces the earlier in place");
        let keys: Vec<&String> = value["request"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["model", "messages", "temperature", "api_key", "metadata"]);
        assert_eq!(body.to_bytes(), serde_json::to_vec(&body.to_value()).unwrap());

        // Messages an earlier record holds are named, not copied; both paths agree.
        let prefix = LoggedPrefix { n_messages: 2, file: "episode-3/debug.json".into() };
        let fast: Value = serde_json::from_str(&debug_record(base, &body, Some(&prefix), reply.clone())).unwrap();
        let slow: Value =
            serde_json::from_str(&debug_record_of_value(base, body.to_value(), Some((&prefix, 2)), reply)).unwrap();
        assert_eq!(fast, slow);
        assert_eq!(fast["request"]["messages_logged"], json!({"file": "episode-3/debug.json", "n_messages": 2}));
        let kept = fast["request"]["messages"].as_array().unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0]["reasoning_content"], "thought");
    }
}
