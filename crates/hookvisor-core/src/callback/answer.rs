//! What a callback request says (rule 5): its `action` and `message`, and `${hook_response}`.

use serde_json::{Map, Value as Json};

use super::{Response, Verdict};

/// The words `action` takes, for the 400 that names them.
const ACTIONS: &str = "approve, continue, none, reject, abort, deny or block";

/// Reads a request's query (without the `?`) and body into the answer it gives, or the one-line
/// reason it is refused (400; the wait stays open).
pub(super) fn read(
    query: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<Response, String> {
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
            .map_err(|_| "the body is not UTF-8 text; send JSON or a form".to_owned())?;
        match serde_json::from_str::<Json>(text) {
            Ok(json) => {
                let said = match &json {
                    Json::Object(object) => Said::of_object(object)?,
                    _ => Said::default(),
                };
                (json, said)
            }
            Err(_) => {
                let mut said = Said::default();
                if is_form(content_type) {
                    for (key, value) in form_urlencoded::parse(text.as_bytes()) {
                        said.note(&key, &value, "form body")?;
                    }
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

/// The `action` and `message` one part of a request gave.
#[derive(Default)]
struct Said {
    action: Option<String>,
    message: Option<String>,
}

impl Said {
    /// One `key=value` of a query or form; a second `action` or `message` is ambiguous.
    fn note(&mut self, key: &str, value: &str, part: &str) -> Result<(), String> {
        let slot = match key {
            "action" => &mut self.action,
            "message" => &mut self.message,
            _ => return Ok(()),
        };
        if slot.is_some() {
            return Err(format!(
                "'{key}' is given twice in the {part}; give it once"
            ));
        }
        *slot = Some(value.to_owned());
        Ok(())
    }

    /// The fields of a JSON object body; `null` is as good as absent.
    fn of_object(object: &Map<String, Json>) -> Result<Said, String> {
        let field = |key: &str| match object.get(key) {
            None | Some(Json::Null) => Ok(None),
            Some(Json::String(text)) => Ok(Some(text.clone())),
            Some(_) => Err(format!("'{key}' in the JSON body must be a string")),
        };
        Ok(Said {
            action: field("action")?,
            message: field("message")?,
        })
    }
}

/// Whether a body that is no JSON is read as a form: when it says so, or says nothing (a
/// script's `curl -d action=approve` says so; a bare client may not).
fn is_form(content_type: Option<&str>) -> bool {
    match content_type {
        None => true,
        Some(value) => value.split(';').next().is_some_and(|mime| {
            mime.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        }),
    }
}

fn verdict(action: Option<&str>) -> Result<Verdict, String> {
    let Some(action) = action else {
        return Ok(Verdict::Success);
    };
    match action.to_ascii_lowercase().as_str() {
        "approve" | "continue" | "none" => Ok(Verdict::Success),
        "reject" | "abort" | "deny" => Ok(Verdict::Abort),
        "block" => Ok(Verdict::Block),
        _ => {
            let shown: String = action.chars().take(40).collect();
            Err(format!("unknown action '{shown}'; use {ACTIONS}"))
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

    #[test]
    fn verdicts_and_messages_by_table() {
        use Verdict::*;
        let cases = [
            ("", None, "", Success, None),
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
                "",
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
            ("", None, "action=deny", Abort, None),
            // A text body is no form: its words are not an action.
            ("action=approve", TEXT, "action=block", Success, None),
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

    #[test]
    fn refusals_name_what_is_wrong() {
        let cases: [(&str, Option<&str>, &[u8], &str); 6] = [
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
                "",
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
            ("", None, b"\xff\xfe", "the body is not UTF-8 text"),
        ];
        for (query, content_type, body, want) in cases {
            let got = read(query, content_type, body).unwrap_err();
            assert!(got.starts_with(want), "{query}: {got}");
        }
    }

    #[test]
    fn the_hook_response_is_the_query_and_the_body() {
        let got = read(
            "token=secret&action=approve&tag=a&tag=b&tag=c&note=caf%C3%A9",
            JSON,
            br#"{"action":"approve","score":3}"#,
        )
        .unwrap();
        assert_eq!(
            got.json,
            json!({
                "query": {"action": "approve", "tag": ["a", "b", "c"], "note": "café"},
                "body": {"action": "approve", "score": 3},
            })
        );
        let text = read("", TEXT, b"looks good").unwrap();
        assert_eq!(text.json, json!({"query": {}, "body": "looks good"}));
        let scalar = read("", JSON, b"42").unwrap();
        assert_eq!(scalar.json, json!({"query": {}, "body": 42}));
        assert_eq!(
            read("", None, b"").unwrap().json,
            json!({"query": {}, "body": null})
        );
    }
}
