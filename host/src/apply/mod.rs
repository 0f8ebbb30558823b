//! The only writer: server-side apply of changed slices and deletion of unwanted ones, and
//! the EndpointSlice API's rules, checked before anything is sent ([`validate`]).

pub mod validate;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
};

use crate::{error::Error, reconcile::slices::Changes};

/// The one field manager this controller applies with.
pub const FIELD_MANAGER: &str = "nad-service-controller.isim.dev";

/// What a sync wrote: slice names with the generation the API server returned, and the writes
/// that failed. Every write is attempted even when one fails.
#[derive(Debug, Default)]
pub struct Written {
    pub applied: Vec<(String, Option<i64>)>,
    pub deleted: Vec<String>,
    pub failed: Vec<Failed>,
}

/// A write the API server did not take.
#[derive(Debug)]
pub struct Failed {
    pub error: Error,
    /// For a refused apply (`422`): the slice as sent, to tell which endpoint was refused.
    pub slice: Option<EndpointSlice>,
}

/// Applies every changed slice and deletes the unwanted ones.
pub async fn write(client: &Client, namespace: &str, changes: Changes) -> Written {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut written = Written::default();
    for slice in changes.apply {
        let name = slice.name_any();
        match api.patch(&name, &params, &Patch::Apply(&slice)).await {
            Ok(stored) => written.applied.push((name, stored.metadata.generation)),
            Err(source) => {
                let refused = crate::error::is_invalid(&source);
                written.failed.push(Failed {
                    error: Error::Apply {
                        namespace: namespace.to_owned(),
                        name,
                        source,
                    },
                    slice: refused.then_some(slice),
                });
            }
        }
    }
    for name in changes.delete {
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => written.deleted.push(name),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => written.failed.push(Failed {
                error: Error::Delete {
                    namespace: namespace.to_owned(),
                    name,
                    source,
                },
                slice: None,
            }),
        }
    }
    written
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

    #[tokio::test]
    async fn applies_with_one_forced_field_manager_then_deletes() {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let server = tokio::spawn(async move {
            let (request, send) = handle.next_request().await.unwrap();
            assert_eq!(request.method(), Method::PATCH);
            assert_eq!(
                request.uri().to_string(),
                "/apis/discovery.k8s.io/v1/namespaces/team-a/endpointslices/web-ipv4-0?&force=true&fieldManager=nad-service-controller.isim.dev"
            );
            assert_eq!(
                request.headers()["content-type"],
                "application/apply-patch+yaml"
            );
            let body: serde_json::Value = serde_json::from_slice(&body_of(request).await).unwrap();
            assert_eq!(body["apiVersion"], "discovery.k8s.io/v1");
            assert_eq!(body["kind"], "EndpointSlice");
            assert_eq!(body["endpoints"][0]["addresses"][0], "192.168.2.4");
            let reply = serde_json::to_vec(&slice("web-ipv4-0")).unwrap();
            send.send_response(Response::new(Body::from(reply)));

            let (request, send) = handle.next_request().await.unwrap();
            assert_eq!(request.method(), Method::DELETE);
            assert_eq!(
                request.uri().to_string(),
                "/apis/discovery.k8s.io/v1/namespaces/team-a/endpointslices/web-ipv4-1?"
            );
            let gone = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "not found", "reason": "NotFound", "code": 404});
            send.send_response(
                Response::builder()
                    .status(404)
                    .body(Body::from(serde_json::to_vec(&gone).unwrap()))
                    .unwrap(),
            );
        });
        let changes = Changes {
            apply: vec![slice("web-ipv4-0")],
            delete: vec!["web-ipv4-1".into()],
            ..Changes::default()
        };
        let written = write(&client, "team-a", changes).await;
        assert_eq!(written.applied, vec![("web-ipv4-0".into(), None)]);
        assert!(written.deleted.is_empty());
        assert!(
            written.failed.is_empty(),
            "a slice already gone is not an error"
        );
        server.await.unwrap();
    }

    /// One refused slice does not stop the others, and what was written is still reported.
    #[tokio::test]
    async fn a_refused_write_is_reported_beside_the_writes_that_worked() {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
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
            apply: vec![bad, slice("web-ipv4-1")],
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
