//! The fetcher of nad-service-controller's plugins: plugins as OCI artifacts, the convention of Kubewarden, Istio's WasmPlugin and Spin: a
//! source names `oci://<registry>/<repository>@sha256:<digest>` (a tag is resolved to a digest
//! and logged), the [`Puller`] fetches the manifest and its one Wasm layer, checks both against
//! their digests and the size limit (before downloading the layer, and while reading it), and
//! keeps them on disk by digest ([`Cache`]): a pinned plugin that was pulled once loads again
//! without the registry. A registry the [`Credentials`] name is spoken to with its credential,
//! never anonymously; one whose certificate a private CA signs is trusted with the
//! [`RegistryCas`] given for it, and for no other registry.
//!
//! - `session`: the clients of the current credentials and CAs, and how one request
//!   authenticates; `token`: identity tokens exchanged at token servers; `tls`: the CAs;
//! - `fetch`: every answer read within a deadline ([`Timeouts`]) and a size limit;
//! - `describe`: registry errors in an operator's terms;
//! - [`RegistryArgs`]: these settings as the command line gives them, and a verification
//!   policy's file ([`read_policy`]);
//! - `verify`: cosign signatures checked against a verification [`Policy`];
//! - `loader`: the [`Puller`] as the plugin runtime's loader asks for it
//!   ([`nad_model::fetch::Fetch`]).

mod args;
mod artifact;
mod auth;
mod cache;
mod credentials;
mod describe;
mod fetch;
mod limits;
mod loader;
mod options;
mod puller;
mod reference;
mod session;
mod tls;
mod token;
mod verify;

pub use args::{RegistryArgs, parse_policy, read_policy};
pub use artifact::{
    LAYER_MEDIA_TYPES, Layer, PUSH_CONFIG_MEDIA_TYPE, PUSH_LAYER_MEDIA_TYPE, wasm_layer,
};
pub use cache::Cache;
pub use credentials::{Credential, Credentials, CredentialsError};
pub use limits::{
    MAX_MANIFEST_BYTES, MAX_REFERRERS, MAX_SIGNATURE_LAYER_BYTES, MAX_SIGNATURE_LAYERS,
    MAX_TOKEN_BYTES,
};
pub use options::{RegistryOptions, Timeouts};
pub use puller::{FetchError, Pulled, Puller};
pub use reference::{OciRef, SCHEME};
pub use tls::{GivenIn, RegistryCas, configmap_key, install_crypto_provider, registry_of_key};
pub use verify::{AnyOf, Keyless, Policy, Signer, TrustRoot, Verified, Verifier};
