//! The only writer: creates and updates of changed slices and deletion of unwanted ones, and
//! the EndpointSlice API's rules, checked before anything is sent (`nad_core::validate`).
//!
//! Writes go as the upstream EndpointSlice controller sends them, a create or an update of the
//! whole slice, not as server-side apply: the API server spends less than half the time on
//! them for a 100-endpoint slice, for the same bytes in etcd (`make bench`'s slice writes, in
//! BENCHMARKS.md). No write lands on an object this controller does not own:
//! - a slice it saw is updated with the `uid` and `resourceVersion` it saw: had anyone changed
//!   the slice since, its `managed-by` or `service-name` say, or deleted it, the API answers
//!   `409` (or `404`) and nothing is written; an update replaces a hand edit whole;
//! - a new slice is a create, which never takes over an object of that name (`409`): the
//!   slice then takes the next free name;
//! - a delete is conditional on the uid and `resourceVersion` seen.

use std::collections::BTreeSet;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, PostParams, Preconditions},
};

use crate::error::Error;
use nad_core::slices::{self, Changes};

/// The one field manager this controller writes with.
pub const FIELD_MANAGER: &str = "nad-service-controller.isim.dev";

/// How many names a new slice tries when each is taken by an object of someone else.
const NAME_TRIES: usize = 16;

/// What a sync wrote: slice names with the generation the API server returned, and the writes
/// that failed. Every write is attempted even when one fails.
#[derive(Debug, Default)]
pub struct Written {
    pub applied: Vec<(String, Option<i64>)>,
    pub deleted: Vec<String>,
    pub failed: Vec<Failed>,
    /// Writes not made because the slice changed since it was seen (`409`): the watch brings
    /// the change, and the next plan starts from it.
    pub outdated: Vec<String>,
    /// Names a new slice did not take because an object this controller does not manage has
    /// them.
    pub foreign: Vec<String>,
}

/// A write the API server did not take.
#[derive(Debug)]
pub struct Failed {
    pub error: Error,
    /// For a refused apply (`422`): the slice as sent, to tell which endpoint was refused.
    pub slice: Option<EndpointSlice>,
}

fn conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

fn gone(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

fn params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    }
}

/// Writes every changed slice and deletes the unwanted ones.
pub async fn write(client: &Client, namespace: &str, changes: Changes) -> Written {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let mut taken = changes.taken;
    let mut written = Written::default();
    for slice in changes.write {
        let result = if slices::is_new(&slice) {
            create(&api, slice, &mut taken, &mut written.foreign).await
        } else {
            let name = slice.name_any();
            match api.replace(&name, &params(), &slice).await {
                Ok(stored) => Ok((name, stored.metadata.generation)),
                // Changed or deleted since it was seen: the watch brings that.
                Err(e) if conflict(&e) || gone(&e) => {
                    written.outdated.push(name);
                    continue;
                }
                Err(source) => Err((slice, source)),
            }
        };
        match result {
            Ok(applied) => written.applied.push(applied),
            Err((slice, source)) => {
                let refused = crate::error::is_invalid(&source);
                written.failed.push(Failed {
                    error: Error::Apply {
                        namespace: namespace.to_owned(),
                        name: slice.name_any(),
                        source,
                    },
                    slice: refused.then_some(slice),
                });
            }
        }
    }
    for seen in changes.delete {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: seen.uid,
                resource_version: seen.resource_version,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&seen.name, &params).await {
            Ok(_) => written.deleted.push(seen.name),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) if conflict(&e) => written.outdated.push(seen.name),
            Err(source) => written.failed.push(Failed {
                error: Error::Delete {
                    namespace: namespace.to_owned(),
                    name: seen.name,
                    source,
                },
                slice: None,
            }),
        }
    }
    written
}

/// Creates a new slice under its name or, while an object this controller does not manage
/// holds that name, the next free one.
async fn create(
    api: &Api<EndpointSlice>,
    mut slice: EndpointSlice,
    taken: &mut BTreeSet<String>,
    foreign: &mut Vec<String>,
) -> Result<(String, Option<i64>), (EndpointSlice, kube::Error)> {
    let mut tries = 0;
    loop {
        let name = slice.name_any();
        match api.create(&params(), &slice).await {
            Ok(stored) => return Ok((name, stored.metadata.generation)),
            Err(e) if conflict(&e) && tries + 1 < NAME_TRIES => {
                tracing::info!(
                    slice = %name,
                    "an EndpointSlice this controller does not manage has this name; left alone, the new slice takes the next free name"
                );
                foreign.push(name);
                slice.metadata.name = Some(slices::next_free_name(&slice, taken));
                tries += 1;
            }
            Err(source) => return Err((slice, source)),
        }
    }
}

/// The pods a refused write concerns: those whose endpoints the refusal names (the API reports
/// fields as `endpoints[<i>]...`, in its message and in `details.causes`), or, when it names
/// none (an admission webhook or policy, say), those whose endpoints the write changed from
/// `stored`.
pub fn refused_pods(
    error: &kube::Error,
    sent: &EndpointSlice,
    stored: Option<&EndpointSlice>,
) -> Vec<String> {
    let named = named_pods(error, sent);
    if !named.is_empty() {
        return named;
    }
    let before = stored
        .and_then(|s| s.endpoints.as_deref())
        .unwrap_or_default();
    let mut pods: Vec<String> = sent
        .endpoints
        .iter()
        .flatten()
        .filter(|e| !before.contains(e))
        .filter_map(|e| e.target_ref.as_ref()?.name.clone())
        .collect();
    pods.sort();
    pods.dedup();
    pods
}

fn named_pods(error: &kube::Error, sent: &EndpointSlice) -> Vec<String> {
    let kube::Error::Api(status) = error else {
        return Vec::new();
    };
    let mut texts = vec![status.message.clone()];
    if let Some(details) = &status.details {
        texts.extend(details.causes.iter().map(|c| c.field.clone()));
    }
    let endpoints = sent.endpoints.as_deref().unwrap_or_default();
    let mut pods: Vec<String> = texts
        .iter()
        .flat_map(|text| {
            text.match_indices("endpoints[")
                .map(move |(at, _)| &text[at + 10..])
        })
        .filter_map(|rest| rest.split(']').next()?.parse::<usize>().ok())
        .filter_map(|index| endpoints.get(index)?.target_ref.as_ref()?.name.clone())
        .collect();
    pods.sort();
    pods.dedup();
    pods
}

#[cfg(test)]
mod tests {
    //! The request shape, checked against a mocked API (the behaviour is tested on a real API
    //! server by the integration tests).
    use super::*;
    use http::{Method, Request, Response};
    use kube::client::Body;
    use nad_core::slices::Seen;

    fn slice(name: &str) -> EndpointSlice {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "team-a"},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["192.168.2.4"]}],
        }))
        .unwrap()
    }

    async fn body_of(request: Request<Body>) -> Vec<u8> {
        request.into_body().collect_bytes().await.unwrap().to_vec()
    }

    fn status(code: u16, reason: &str, message: &str) -> Response<Body> {
        let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": message, "reason": reason, "code": code});
        Response::builder()
            .status(code)
            .body(Body::from(serde_json::to_vec(&status).unwrap()))
            .unwrap()
    }

    fn seen(name: &str) -> Seen {
        Seen {
            name: name.into(),
            uid: Some(format!("uid-{name}")),
            resource_version: Some("7".into()),
        }
    }

    /// A slice seen is updated (`PUT`) at the version seen; a new one is created (`POST`); a
    /// delete is conditional on what was seen.
    #[tokio::test]
    async fn updates_are_at_the_version_seen_new_slices_are_created_deletes_are_conditional() {
        let (service, mut handle) = crate::mock_api::pair();
        let client = Client::new(service, "default");
        let server = tokio::spawn(async move {
            let (request, send) = handle.next_request().await.unwrap();
            assert_eq!(request.method(), Method::PUT);
            assert_eq!(
                request.uri().to_string(),
                "/apis/discovery.k8s.io/v1/namespaces/team-a/endpointslices/web-ipv4-0?&fieldManager=nad-service-controller.isim.dev"
            );
            assert_eq!(request.headers()["content-type"], "application/json");
            let body: serde_json::Value = serde_json::from_slice(&body_of(request).await).unwrap();
            assert_eq!(body["apiVersion"], "discovery.k8s.io/v1");
            assert_eq!(body["kind"], "EndpointSlice");
            assert_eq!(body["metadata"]["resourceVersion"], "7");
            assert_eq!(body["endpoints"][0]["addresses"][0], "192.168.2.4");
            let reply = serde_json::to_vec(&slice("web-ipv4-0")).unwrap();
            send.send_response(Response::new(Body::from(reply)));

            let (request, send) = handle.next_request().await.unwrap();
            assert_eq!(request.method(), Method::POST);
            assert_eq!(
                request.uri().to_string(),
                "/apis/discovery.k8s.io/v1/namespaces/team-a/endpointslices?&fieldManager=nad-service-controller.isim.dev",
            );
            let body: serde_json::Value = serde_json::from_slice(&body_of(request).await).unwrap();
            assert_eq!(body["metadata"]["name"], "web-ipv4-1");
            assert!(body["metadata"].get("resourceVersion").is_none());
            let reply = serde_json::to_vec(&slice("web-ipv4-1")).unwrap();
            send.send_response(Response::new(Body::from(reply)));

            let (request, send) = handle.next_request().await.unwrap();
            assert_eq!(request.method(), Method::DELETE);
            assert_eq!(
                request.uri().to_string(),
                "/apis/discovery.k8s.io/v1/namespaces/team-a/endpointslices/web-ipv4-2?"
            );
            let body: serde_json::Value = serde_json::from_slice(&body_of(request).await).unwrap();
            assert_eq!(
                body["preconditions"],
                serde_json::json!({"uid": "uid-web-ipv4-2", "resourceVersion": "7"})
            );
            send.send_response(status(404, "NotFound", "not found"));
        });
        let mut update = slice("web-ipv4-0");
        update.metadata.resource_version = Some("7".into());
        let changes = Changes {
            write: vec![update, slice("web-ipv4-1")],
            delete: vec![seen("web-ipv4-2")],
            ..Changes::default()
        };
        let written = write(&client, "team-a", changes).await;
        assert_eq!(
            written.applied,
            vec![("web-ipv4-0".into(), None), ("web-ipv4-1".into(), None)]
        );
        assert!(written.deleted.is_empty());
        assert!(
            written.failed.is_empty(),
            "a slice already gone is not an error"
        );
        server.await.unwrap();
    }

    /// A name held by an object this controller does not manage (the create conflicts) is
    /// left to it: the new slice takes the next free name. A slice changed or deleted since it
    /// was seen is not written, and that is no failure.
    #[tokio::test]
    async fn a_taken_name_is_left_alone_and_an_outdated_write_is_not_made() {
        let (service, mut handle) = crate::mock_api::pair();
        let client = Client::new(service, "default");
        let server = tokio::spawn(async move {
            let mut names = Vec::new();
            for _ in 0..2 {
                let (request, send) = handle.next_request().await.unwrap();
                assert_eq!(request.method(), Method::POST);
                let body: serde_json::Value =
                    serde_json::from_slice(&body_of(request).await).unwrap();
                names.push(body["metadata"]["name"].as_str().unwrap().to_owned());
                if names.len() == 1 {
                    send.send_response(status(
                        409,
                        "AlreadyExists",
                        "endpointslices.discovery.k8s.io \"web-ipv4-0\" already exists",
                    ));
                } else {
                    let reply = serde_json::to_vec(&slice("web-ipv4-2")).unwrap();
                    send.send_response(Response::new(Body::from(reply)));
                }
            }
            assert_eq!(names, ["web-ipv4-0", "web-ipv4-2"], "web-ipv4-1 is ours");
            let (request, send) = handle.next_request().await.unwrap();
            assert_eq!(request.method(), Method::PUT);
            send.send_response(status(409, "Conflict", "the object has been modified"));
            let (request, send) = handle.next_request().await.unwrap();
            assert_eq!(request.method(), Method::PUT);
            send.send_response(status(404, "NotFound", "not found"));
            let (_, send) = handle.next_request().await.unwrap();
            send.send_response(status(
                409,
                "Conflict",
                "Precondition failed: UID in precondition",
            ));
        });
        let mut new = slice("web-ipv4-0");
        new.labels_mut()
            .insert(nad_model::labels::SERVICE_NAME_LABEL.into(), "web".into());
        let mut outdated = slice("web-ipv4-1");
        outdated.metadata.resource_version = Some("7".into());
        let mut deleted = slice("web-ipv4-4");
        deleted.metadata.resource_version = Some("7".into());
        let changes = Changes {
            write: vec![new, outdated, deleted],
            delete: vec![seen("web-ipv4-3")],
            taken: BTreeSet::from(["web-ipv4-0".into(), "web-ipv4-1".into()]),
            ..Changes::default()
        };
        let written = write(&client, "team-a", changes).await;
        assert_eq!(written.applied, vec![("web-ipv4-2".into(), None)]);
        assert_eq!(written.foreign, ["web-ipv4-0"]);
        assert_eq!(written.outdated, ["web-ipv4-1", "web-ipv4-4", "web-ipv4-3"]);
        assert!(written.failed.is_empty(), "{:?}", written.failed);
        server.await.unwrap();
    }

    /// One refused slice does not stop the others, and what was written is still reported.
    #[tokio::test]
    async fn a_refused_write_is_reported_beside_the_writes_that_worked() {
        let (service, mut handle) = crate::mock_api::pair();
        let client = Client::new(service, "default");
        let server = tokio::spawn(async move {
            let (_, send) = handle.next_request().await.unwrap();
            let invalid = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "EndpointSlice.discovery.k8s.io \"web-ipv4-0\" is invalid: endpoints[1].addresses[0]: Invalid value",
                "reason": "Invalid", "code": 422,
                "details": {"causes": [{"field": "endpoints[1].addresses[0]", "reason": "FieldValueInvalid"}]}});
            send.send_response(
                Response::builder()
                    .status(422)
                    .body(Body::from(serde_json::to_vec(&invalid).unwrap()))
                    .unwrap(),
            );
            let (_, send) = handle.next_request().await.unwrap();
            let reply = serde_json::to_vec(&slice("web-ipv4-1")).unwrap();
            send.send_response(Response::new(Body::from(reply)));
        });
        let mut bad = slice("web-ipv4-0");
        bad.endpoints = Some(
            serde_json::from_value(serde_json::json!([
                {"addresses": ["10.0.0.1"], "targetRef": {"kind": "Pod", "name": "good"}},
                {"addresses": ["10.0.0.2"], "targetRef": {"kind": "Pod", "name": "bad"}},
            ]))
            .unwrap(),
        );
        let changes = Changes {
            write: vec![bad, slice("web-ipv4-1")],
            delete: vec![],
            ..Changes::default()
        };
        let written = write(&client, "team-a", changes).await;
        assert_eq!(written.applied, vec![("web-ipv4-1".into(), None)]);
        assert_eq!(written.failed.len(), 1);
        let failed = &written.failed[0];
        let Error::Apply { source, .. } = &failed.error else {
            panic!("{:?}", failed.error)
        };
        let sent = failed.slice.as_ref().unwrap();
        assert_eq!(refused_pods(source, sent, None), vec!["bad"]);
        let unnamed = kube::Error::Api(Box::new(
            kube::core::Status::failure("denied by a policy", "Invalid").with_code(422),
        ));
        let mut stored = sent.clone();
        stored.endpoints.as_mut().unwrap().truncate(1);
        assert_eq!(
            refused_pods(&unnamed, sent, Some(&stored)),
            vec!["bad"],
            "without a field path: the pods the write changed"
        );
        server.await.unwrap();
    }
}
