//! What a callback request says (rule 5): its `action` and `message`, and `${hook_response}`.
//!
//! Read strictly and failing safe: a request is taken only when it plainly says what it means.
//! `action` comes from the query, an `application/json` object body or an
//! `application/x-www-form-urlencoded` body, its key written exactly `action`; a request with
//! no action at all is refused, since link unfurlers, mail scanners and browser prefetches
//! fetch a bare URL on their own. Every refusal leaves the wait open (the token is not used).

use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::{Map, Value as Json};

use super::{Response, Verdict};

/// The words `action` takes, for the 400 that names them.
const ACTIONS: &str = "approve, continue, none, reject, abort, deny or block";

/// The keys a request answers with.
const KEYS: [&str; 2] = ["action", "message"];

/// Why a request is not taken: its HTTP status (400, or 415 for a body of another type) and a
/// one-line reason. The wait stays open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Unreadable {
    /// 400 or 415.
    pub(super) status: u16,
    /// What is wrong and what to send instead.
    pub(super) reason: String,
}

impl Unreadable {
    /// A 400 with `reason`.
    pub(super) fn bad(reason: impl Into<String>) -> Unreadable {
        Unreadable {
            status: 400,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status, self.reason)
    }
}

/// The body's kind, by its `Content-Type`.
enum BodyKind {
    Json,
    Form,
}

/// Reads a request's query (without the `?`) and body into the answer it gives, or why it is
/// refused (the wait stays open).
pub(super) fn read(
    query: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<Response, Unreadable> {
    let mut said = Said::default();
    let mut query_json = Map::new();
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        // The pipelines route's token is the credential, not part of the answer.
        if key == "token" {
            continue;
        }
        said.note(&key, &value, "query")?;
        match query_json.get_mut(key.as_ref()) {
            None => {
                query_json.insert(key.into_owned(), Json::String(value.into_owned()));
            }
            Some(Json::Array(values)) => values.push(Json::String(value.into_owned())),
            Some(first) => {
                let first = first.take();
                query_json.insert(
                    key.into_owned(),
                    Json::Array(vec![first, Json::String(value.into_owned())]),
                );
            }
        }
    }
    let query_said = said;

    let (body_json, body_said) = if body.is_empty() {
        (Json::Null, Said::default())
    } else {
        let text = std::str::from_utf8(body)
            .map_err(|_| Unreadable::bad("the body is not UTF-8 text; send JSON or a form"))?;
        match body_kind(content_type)? {
            BodyKind::Json => {
                let object = json_object(text)?;
                let said = Said::of_object(&object)?;
                (Json::Object(object), said)
            }
            BodyKind::Form => {
                let mut said = Said::default();
                for (key, value) in form_urlencoded::parse(text.as_bytes()) {
                    said.note(&key, &value, "form body")?;
                }
                (Json::String(text.to_owned()), said)
            }
        }
    };

    let action = body_said.action.or(query_said.action);
    let message = body_said.message.or(query_said.message);
    Ok(Response {
        verdict: verdict(action.as_deref())?,
        message,
        json: serde_json::json!({"query": query_json, "body": body_json}),
    })
}

/// How a body is read: JSON or a form, as its `Content-Type` says; anything else (text, a
/// multipart form, no type at all) is 415, never read as "no action".
fn body_kind(content_type: Option<&str>) -> Result<BodyKind, Unreadable> {
    let mime = content_type
        .and_then(|value| value.split(';').next())
        .map(str::trim)
        .unwrap_or("");
    if mime.eq_ignore_ascii_case("application/json") {
        Ok(BodyKind::Json)
    } else if mime.eq_ignore_ascii_case("application/x-www-form-urlencoded") {
        Ok(BodyKind::Form)
    } else {
        let shown: String = mime.chars().take(60).collect();
        Err(Unreadable {
            status: 415,
            reason: format!(
                "a body of type '{shown}' is not read; send Content-Type: application/json or \
                 application/x-www-form-urlencoded, or put action=… in the query with no body"
            ),
        })
    }
}

/// A JSON body: one object whose keys are each given once. A BOM, another value or a repeated
/// key is refused: which of two `action`s is meant is anybody's guess.
fn json_object(text: &str) -> Result<Map<String, Json>, Unreadable> {
    let mut parser = serde_json::Deserializer::from_str(text);
    let object = parser
        .deserialize_map(UniqueKeys)
        .and_then(|object| parser.end().map(|()| object))
        .map_err(|err| {
            Unreadable::bad(format!(
                "the JSON body is not one object with each key once ({err}); send \
                 {{\"action\": \"…\"}}"
            ))
        })?;
    Ok(object)
}

/// Reads a JSON object, refusing a key given twice.
struct UniqueKeys;

impl<'de> Visitor<'de> for UniqueKeys {
    type Value = Map<String, Json>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            let value: Json = access.next_value()?;
            if object.contains_key(&key) {
                let shown: String = key.chars().take(40).collect();
                return Err(serde::de::Error::custom(format!(
                    "'{shown}' is given twice"
                )));
            }
            object.insert(key, value);
        }
        Ok(object)
    }
}

/// The `action` and `message` one part of a request gave.
#[derive(Default)]
struct Said {
    action: Option<String>,
    message: Option<String>,
}

impl Said {
    /// One `key=value` of a query or form; a second `action` or `message` is ambiguous.
    fn note(&mut self, key: &str, value: &str, part: &str) -> Result<(), Unreadable> {
        let slot = match exact_key(key, part)? {
            Some("action") => &mut self.action,
            Some(_) => &mut self.message,
            None => return Ok(()),
        };
        if slot.is_some() {
            return Err(Unreadable::bad(format!(
                "'{key}' is given twice in the {part}; give it once"
            )));
        }
        *slot = Some(value.to_owned());
        Ok(())
    }

    /// The fields of a JSON object body; `null` is as good as absent.
    fn of_object(object: &Map<String, Json>) -> Result<Said, Unreadable> {
        for key in object.keys() {
            exact_key(key, "JSON body")?;
        }
        let field = |key: &str| match object.get(key) {
            None | Some(Json::Null) => Ok(None),
            Some(Json::String(text)) => Ok(Some(text.clone())),
            Some(_) => Err(Unreadable::bad(format!(
                "'{key}' in the JSON body must be a string"
            ))),
        };
        Ok(Said {
            action: field("action")?,
            message: field("message")?,
        })
    }
}

/// Which of [`KEYS`] `key` is; a key that differs from one only in case (`Action`) is refused
/// rather than ignored, since ignoring it would read a "reject" as no action.
fn exact_key(key: &str, part: &str) -> Result<Option<&'static str>, Unreadable> {
    for known in KEYS {
        if key == known {
            return Ok(Some(known));
        }
        if key.eq_ignore_ascii_case(known) {
            return Err(Unreadable::bad(format!(
                "'{key}' in the {part} is not read; write the key '{known}' in lower case"
            )));
        }
    }
    Ok(None)
}

fn verdict(action: Option<&str>) -> Result<Verdict, Unreadable> {
    let Some(action) = action else {
        return Err(Unreadable::bad(format!(
            "no action given; say action=… ({ACTIONS}): a bare URL is refused, since link \
             scanners and previews fetch one by themselves"
        )));
    };
    match action.to_ascii_lowercase().as_str() {
        "approve" | "continue" | "none" => Ok(Verdict::Success),
        "reject" | "abort" | "deny" => Ok(Verdict::Abort),
        "block" => Ok(Verdict::Block),
        _ => {
            let shown: String = action.chars().take(40).collect();
            Err(Unreadable::bad(format!(
                "unknown action '{shown}'; use {ACTIONS}"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const JSON: Option<&str> = Some("application/json");
    const FORM: Option<&str> = Some("application/x-www-form-urlencoded; charset=utf-8");
    const TEXT: Option<&str> = Some("text/plain");
    const MULTIPART: Option<&str> = Some("multipart/form-data; boundary=x");

    /// A query, a content type, a body, the status refused with and how its reason starts.
    type Refused = (
        &'static str,
        Option<&'static str>,
        &'static [u8],
        u16,
        &'static str,
    );

    #[test]
    fn verdicts_and_messages_by_table() {
        use Verdict::*;
        let cases = [
            ("action=approve", None, "", Success, None),
            ("action=continue", None, "", Success, None),
            ("action=none", None, "", Success, None),
            ("action=Reject", None, "", Abort, None),
            ("action=abort", None, "", Abort, None),
            (
                "action=deny&message=no%20way",
                None,
                "",
                Abort,
                Some("no way"),
            ),
            (
                "action=block&message=fix+the+tests",
                None,
                "",
                Block,
                Some("fix the tests"),
            ),
            // The body wins over the query, field by field.
            (
                "action=approve&message=q",
                JSON,
                r#"{"action":"block"}"#,
                Block,
                Some("q"),
            ),
            ("action=block", JSON, r#"{"message":"m"}"#, Block, Some("m")),
            (
                "action=none",
                JSON,
                r#"{"action":null,"message":"m"}"#,
                Success,
                Some("m"),
            ),
            (
                "action=approve",
                FORM,
                "action=block&message=form+says",
                Block,
                Some("form says"),
            ),
            ("", FORM, "action=deny", Abort, None),
        ];
        for (query, content_type, body, verdict, message) in cases {
            let got = read(query, content_type, body.as_bytes())
                .unwrap_or_else(|e| panic!("{query} {body}: {e}"));
            assert_eq!(
                (got.verdict, got.message.as_deref()),
                (verdict, message),
                "{query} {body}"
            );
        }
    }

    /// The review's table (F6, F7): requests that plainly meant "reject", or said nothing, were
    /// taken as an approval. Each is now refused, so the wait stays open for a real answer.
    #[test]
    fn requests_that_do_not_plainly_answer_are_refused() {
        let cases: [Refused; 13] = [
            ("", None, b"", 400, "no action given"),
            ("message=hi", None, b"", 400, "no action given"),
            ("", JSON, br#"{"message":"m"}"#, 400, "no action given"),
            (
                "",
                MULTIPART,
                b"--x\r\nContent-Disposition: form-data; name=\"action\"\r\n\r\nreject\r\n--x--\r\n",
                415,
                "a body of type 'multipart/form-data' is not read",
            ),
            ("", TEXT, b"action=reject", 415, "a body of type 'text/plain'"),
            ("action=approve", TEXT, b"action=reject", 415, "a body of type"),
            ("", None, b"action=reject", 415, "a body of type ''"),
            ("Action=reject", None, b"", 400, "'Action' in the query is not read"),
            (
                "",
                JSON,
                br#"{"Action":"reject"}"#,
                400,
                "'Action' in the JSON body is not read",
            ),
            (
                "",
                FORM,
                b"ACTION=reject",
                400,
                "'ACTION' in the form body is not read",
            ),
            (
                "",
                JSON,
                br#"{"action":"reject","action":"approve"}"#,
                400,
                "the JSON body is not one object with each key once ('action' is given twice",
            ),
            (
                "action=approve",
                JSON,
                b"\xef\xbb\xbf{\"action\":\"reject\"}",
                400,
                "the JSON body is not one object",
            ),
            ("action=approve", JSON, b"[\"reject\"]", 400, "the JSON body is not one object"),
        ];
        for (query, content_type, body, status, want) in cases {
            let got = read(query, content_type, body).unwrap_err();
            assert_eq!(got.status, status, "{query}: {got}");
            assert!(got.reason.starts_with(want), "{query}: {got}");
        }
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        let cases: [(&str, Option<&str>, &[u8], &str); 7] = [
            (
                "action=maybe",
                None,
                b"",
                "unknown action 'maybe'; use approve,",
            ),
            ("", JSON, br#"{"action":"yes"}"#, "unknown action 'yes'"),
            (
                "",
                JSON,
                br#"{"action":true}"#,
                "'action' in the JSON body must be a string",
            ),
            (
                "action=none",
                JSON,
                br#"{"message":1}"#,
                "'message' in the JSON body must be a string",
            ),
            (
                "action=approve&action=block",
                None,
                b"",
                "'action' is given twice in the query",
            ),
            ("", JSON, b"\xff\xfe", "the body is not UTF-8 text"),
            (
                "action=approve",
                JSON,
                br#"{"a":1} {"b":2}"#,
                "the JSON body is not one object",
            ),
        ];
        for (query, content_type, body, want) in cases {
            let got = read(query, content_type, body).unwrap_err();
            assert_eq!(got.status, 400, "{query}: {got}");
            assert!(got.reason.starts_with(want), "{query}: {got}");
        }
    }

    #[test]
    fn the_hook_response_is_the_query_and_the_body() {
        let got = read(
            "token=secret&action=approve&tag=a&tag=b&tag=c&note=caf%C3%A9",
            JSON,
            br#"{"action":"approve","score":3,"nested":{"k":1}}"#,
        )
        .unwrap();
        assert_eq!(
            got.json,
            json!({
                "query": {"action": "approve", "tag": ["a", "b", "c"], "note": "café"},
                "body": {"action": "approve", "score": 3, "nested": {"k": 1}},
            })
        );
        let form = read("", FORM, b"action=approve&why=ok").unwrap();
        assert_eq!(
            form.json,
            json!({"query": {}, "body": "action=approve&why=ok"})
        );
        assert_eq!(
            read("action=none", None, b"").unwrap().json,
            json!({"query": {"action": "none"}, "body": null})
        );
    }
}
