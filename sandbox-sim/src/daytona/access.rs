//! The control plane's calls around a sandbox's lifecycle: labels, auto-stop and TTL
//! intervals, preview links and SSH access tokens.

use super::api::{Api, error, json_answer, missing};
use super::{random_token, random_uuid};
use crate::{SimRequest, SimResponse};
use sandbox_sdk_core::time::format_rfc3339_millis;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

impl Api {
    pub(super) fn labels(&self, id: &str, request: &SimRequest, path: &str) -> SimResponse {
        let labels = match request.json::<Value>() {
            Ok(body) => match serde_json::from_value::<BTreeMap<String, String>>(
                body.get("labels").cloned().unwrap_or(Value::Null),
            ) {
                Ok(l) => l,
                Err(_) => return error(400, path, "labels must be an object of strings"),
            },
            Err(e) => return error(400, path, &e),
        };
        self.with(id, |r| {
            r.labels = labels;
            r.updated_at = SystemTime::now();
            json_answer(200, &json!({ "labels": r.labels }))
        })
        .unwrap_or_else(|| missing(id, path))
    }

    pub(super) fn interval(&self, id: &str, which: &str, minutes: &str, path: &str) -> SimResponse {
        let Ok(n) = minutes.parse::<f64>().map(|n| n as i64) else {
            return error(400, path, "Validation failed (numeric string is expected)");
        };
        if n < 0 && which != "autodelete" {
            return error(400, path, &format!("{which} interval must not be negative"));
        }
        self.with(id, |r| {
            match which {
                "autostop" => {
                    r.auto_stop = n;
                    if n > 0 {
                        r.auto_pause = 0;
                    }
                }
                "autopause" => {
                    r.auto_pause = n;
                    if n > 0 {
                        r.auto_stop = 0;
                    }
                }
                "autoarchive" => r.auto_archive = if n == 0 { 43200 } else { n },
                "autodelete" => r.auto_delete = n,
                _ => {
                    r.auto_destroy_at =
                        (n > 0).then(|| SystemTime::now() + Duration::from_secs(n as u64 * 60))
                }
            }
            r.updated_at = SystemTime::now();
            json_answer(200, &self.dto(r, false))
        })
        .unwrap_or_else(|| missing(id, path))
    }

    pub(super) fn preview(&self, id: &str, port: &str, path: &str) -> SimResponse {
        let Some(port) = parse_port(port) else {
            return error(400, path, "Invalid port");
        };
        let host_port = self.port().to_owned();
        self.with(id, |r| {
            json_answer(
                200,
                &json!({
                    "sandboxId": r.id,
                    "url": format!("http://{port}-{}.preview.localhost:{host_port}", r.id),
                    "token": r.preview_token,
                }),
            )
        })
        .unwrap_or_else(|| missing(id, path))
    }

    pub(super) fn signed_preview(
        &self,
        id: &str,
        port: &str,
        request: &SimRequest,
        path: &str,
    ) -> SimResponse {
        let Some(port) = parse_port(port) else {
            return error(400, path, "Invalid port");
        };
        let seconds = match request
            .query_param("expiresInSeconds")
            .map(|s| s.parse::<u64>())
        {
            None => 60,
            Some(Ok(n)) if (1..=86_400).contains(&n) => n,
            Some(_) => return error(400, path, "expiresInSeconds must be between 1 and 86400"),
        };
        let host_port = self.port().to_owned();
        self.with(id, |r| {
            let token = random_token(32).to_lowercase();
            let expires = SystemTime::now() + Duration::from_secs(seconds);
            r.signed.retain(|(_, _, at)| *at > SystemTime::now());
            r.signed.push((token.clone(), port, expires));
            json_answer(
                200,
                &json!({
                    "sandboxId": r.id,
                    "port": port,
                    "token": token,
                    "url": format!("http://{port}-{token}.preview.localhost:{host_port}"),
                }),
            )
        })
        .unwrap_or_else(|| missing(id, path))
    }

    pub(super) fn expire_preview(
        &self,
        id: &str,
        port: &str,
        token: &str,
        path: &str,
    ) -> SimResponse {
        let Some(port) = parse_port(port) else {
            return error(400, path, "Invalid port");
        };
        self.with(id, |r| {
            r.signed.retain(|(t, p, _)| !(t == token && *p == port));
            SimResponse::empty(200)
        })
        .unwrap_or_else(|| missing(id, path))
    }

    pub(super) fn ssh_access(&self, id: &str, request: &SimRequest, path: &str) -> SimResponse {
        let minutes = match request
            .query_param("expiresInMinutes")
            .map(|m| m.parse::<f64>())
        {
            None => 60.0,
            Some(Ok(n)) if n > 0.0 => n,
            Some(_) => return error(400, path, "expiresInMinutes must be a positive number"),
        };
        let port = self.port().to_owned();
        self.with(id, |r| {
            let token = random_token(32);
            let now = SystemTime::now();
            let expires = now + Duration::from_secs_f64(minutes * 60.0);
            // One live token per sandbox: a new one revokes the earlier ones.
            r.ssh = Some((token.clone(), expires));
            json_answer(
                200,
                &json!({
                    "id": random_uuid(),
                    "sandboxId": r.id,
                    "token": token,
                    "expiresAt": format_rfc3339_millis(expires),
                    "createdAt": format_rfc3339_millis(now),
                    "updatedAt": format_rfc3339_millis(now),
                    "sshCommand": format!("ssh -p {port} {token}@127.0.0.1"),
                }),
            )
        })
        .unwrap_or_else(|| missing(id, path))
    }

    pub(super) fn revoke_ssh(&self, id: &str, request: &SimRequest, path: &str) -> SimResponse {
        let token = request.query_param("token");
        self.with(id, |r| {
            if token.is_none() || r.ssh.as_ref().map(|(t, _)| t) == token.as_ref() {
                r.ssh = None;
            }
            json_answer(200, &self.dto(r, false))
        })
        .unwrap_or_else(|| missing(id, path))
    }

    pub(super) fn validate_ssh(&self, request: &SimRequest) -> SimResponse {
        let token = request.query_param("token").unwrap_or_default();
        let all = self.settled();
        let owner = all.values().find(|r| {
            r.ssh
                .as_ref()
                .is_some_and(|(t, at)| *t == token && *at > SystemTime::now())
        });
        json_answer(
            200,
            &json!({ "valid": owner.is_some(), "sandboxId": owner.map(|r| r.id.clone()) }),
        )
    }
}

fn parse_port(text: &str) -> Option<u16> {
    text.parse::<u16>().ok().filter(|p| *p > 0)
}
