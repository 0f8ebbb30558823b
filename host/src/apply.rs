//! The only writer: server-side apply of changed slices and deletion of unwanted ones.

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
};

use crate::{error::Error, plan::Changes};

/// The one field manager this controller applies with.
pub const FIELD_MANAGER: &str = "nad-service-controller.isim.dev";

/// What a sync wrote: slice names with the generation the API server returned.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Written {
    pub applied: Vec<(String, Option<i64>)>,
    pub deleted: Vec<String>,
}

/// Applies every changed slice and deletes the unwanted ones. Every write is attempted even
/// when one fails; the first failure is returned (and the rest logged).
pub async fn write(client: &Client, namespace: &str, changes: Changes) -> Result<Written, Error> {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut written = Written::default();
    let mut first_error = None;
    let mut fail = |e: Error| {
        tracing::warn!(error = %e, "EndpointSlice write failed");
        first_error.get_or_insert(e);
    };
    for slice in changes.apply {
        let name = slice.name_any();
        match api.patch(&name, &params, &Patch::Apply(&slice)).await {
            Ok(stored) => written.applied.push((name, stored.metadata.generation)),
            Err(source) => fail(Error::Apply {
                namespace: namespace.to_owned(),
                name,
                source,
            }),
        }
    }
    for name in changes.delete {
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => written.deleted.push(name),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => fail(Error::Delete {
                namespace: namespace.to_owned(),
                name,
                source,
            }),
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(written),
    }
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
            unchanged: 0,
        };
        let written = write(&client, "team-a", changes).await.unwrap();
        assert_eq!(
            written,
            Written {
                applied: vec![("web-ipv4-0".into(), None)],
                deleted: vec![]
            },
            "a slice already gone is not an error"
        );
        server.await.unwrap();
    }
}
