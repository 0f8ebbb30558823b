//! A mocked API server for the unit tests whose point is the request shape: a `kube::Client`
//! over a service that hands each request to the test, which answers it.
//!
//! It stands where `tower-test` stood: that crate turns on tokio's `test-util`, and with a
//! feature of tokio that the release build lacks, `cargo test` built every crate above tokio a
//! second time (hack/README.md, "One build of the dependencies").

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use http::{Request, Response};
use kube::client::Body;
use tokio::sync::{mpsc, oneshot};

type Call = (Request<Body>, oneshot::Sender<Response<Body>>);

/// The client's side: what `kube::Client::new` wraps.
#[derive(Clone)]
pub(crate) struct MockService(mpsc::UnboundedSender<Call>);

/// The test's side: the requests, in the order the client sent them.
pub(crate) struct Handle(mpsc::UnboundedReceiver<Call>);

/// Answers one request.
pub(crate) struct SendResponse(oneshot::Sender<Response<Body>>);

/// A service and the handle that serves its requests.
pub(crate) fn pair() -> (MockService, Handle) {
    let (send, receive) = mpsc::unbounded_channel();
    (MockService(send), Handle(receive))
}

impl Handle {
    /// The next request, or `None` once every clone of the service is gone.
    pub(crate) async fn next_request(&mut self) -> Option<(Request<Body>, SendResponse)> {
        self.0
            .recv()
            .await
            .map(|(request, reply)| (request, SendResponse(reply)))
    }
}

impl SendResponse {
    pub(crate) fn send_response(self, response: Response<Body>) {
        // A client that gave up on the request is no concern of the test's.
        let _ = self.0.send(response);
    }
}

/// Why a request got no answer: the handle was dropped, or dropped the request unanswered.
#[derive(Debug, thiserror::Error)]
#[error("the mocked API dropped the request unanswered")]
pub(crate) struct Unanswered;

impl tower::Service<Request<Body>> for MockService {
    type Response = Response<Body>;
    type Error = Unanswered;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Unanswered>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Unanswered>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let (reply, answer) = oneshot::channel();
        let sent = self.0.send((request, reply));
        Box::pin(async move {
            sent.map_err(|_| Unanswered)?;
            answer.await.map_err(|_| Unanswered)
        })
    }
}
