//! Host bindings generated from the WIT package in `wit/`.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "endpoint-policy",
});
