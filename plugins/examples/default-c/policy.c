// The default endpoint policy of nad-service-controller in C: the same decisions, reasons and
// errors as the Rust plugin in plugins/default/src/policy.rs, as a component of the WIT world
// isim:nad-endpoints/conditioned-endpoint-policy@1.4.0 (bindings: `wit-bindgen c`, see Makefile).
//
// Which pods:
// - if the Service has label app.kubernetes.io/name, only pods with the same value of it;
//   otherwise if it has label app, only pods with the same app; otherwise all pods;
// - pods in phase Succeeded or Failed are excluded; terminating pods are included.
// Endpoint conditions (Kubernetes' own): serving = pod Ready; terminating = pod has a
// deletionTimestamp; ready = publishNotReadyAddresses || (serving && !terminating). And on the
// Service's own network: a pod whose network readiness condition (the pod-conditions import)
// is False is not serving, whatever its Ready says.
//
// Memory: this follows the ownership rules of the generated bindings, although every call
// runs in a fresh instance that the host drops afterwards. An export owns its arguments and
// frees them (the *_free helpers); everything it returns is on the heap (the string_dup
// helpers, malloc), because the generated cabi_post_* functions free it after the host has
// copied it. So never return a string made with conditioned_endpoint_policy_string_set on a literal.
//
// No stdio (printf and friends): see README.md.

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "rust_str.h"
#include "conditioned_endpoint_policy.h"

#ifndef PLUGIN_NAME
#define PLUGIN_NAME "default-c"
#endif
#ifndef PLUGIN_VERSION
#define PLUGIN_VERSION "0.1.0"
#endif

// The recommended Kubernetes name label; takes precedence over APP_LABEL.
static const char NAME_LABEL[] = "app.kubernetes.io/name";
// The traditional app label, used when the Service has no NAME_LABEL.
static const char APP_LABEL[] = "app";
// The most characters of a rejected configuration quoted back in an error message.
#define MAX_QUOTED_CONFIG 80

typedef conditioned_endpoint_policy_string_t string_t;
typedef isim_nad_endpoints_types_list_key_value_t key_values_t;
typedef isim_nad_endpoints_types_service_t service_t;
typedef isim_nad_endpoints_types_pod_t pod_t;
typedef isim_nad_endpoints_types_decision_t decision_t;
typedef isim_nad_endpoints_pod_conditions_option_pod_condition_t network_t;

static void *checked_malloc(size_t size) {
  void *p = malloc(size);
  if (!p) abort();
  return p;
}

static bool equals(const string_t *s, const char *text, size_t len) {
  return s->len == len && memcmp(s->ptr, text, len) == 0;
}

// The value of key in a list of labels, or NULL. A linear scan: the host sorts the lists,
// but this does not rely on it.
static const string_t *value(const key_values_t *list, const char *key) {
  size_t len = strlen(key);
  for (size_t i = 0; i < list->len; i++) {
    if (equals(&list->ptr[i].key, key, len)) return &list->ptr[i].value;
  }
  return NULL;
}

// Moves the buffer's text into a component string (a copy, through the generated helper)
// and empties the buffer for the next message.
static void take(rs_buf *b, string_t *out) {
  conditioned_endpoint_policy_string_dup_n(out, (const char *)b->ptr, b->len);
  b->len = 0;
}

// ---- configuration ----

// `{` and `}` with only whitespace between them.
static bool is_empty_json_object(const uint8_t *s, size_t len) {
  if (len < 2 || s[0] != '{' || s[len - 1] != '}') return false;
  const uint8_t *inner = s + 1;
  size_t inner_len = len - 2;
  rs_trim(&inner, &inner_len);
  return inner_len == 0;
}

// The configuration in quotes, shortened to MAX_QUOTED_CONFIG characters if it is longer.
static void quote_config(rs_buf *b, const uint8_t *s, size_t len) {
  size_t at = 0, chars = 0;
  while (at < len && chars < MAX_QUOTED_CONFIG) {
    uint32_t c;
    at = rs_decode(s, len, at, &c);
    chars++;
  }
  if (at < len) {
    rs_put_debug(b, s, at);
    rs_puts(b, "... (");
    rs_put_usize(b, len);
    rs_puts(b, " bytes)");
  } else {
    rs_put_debug(b, s, len);
  }
}

// The plugin takes no settings: an empty (or whitespace-only) document and an empty JSON
// object {} are accepted. Anything else writes the error for the operator into b.
static bool config_is_valid(const string_t *config, rs_buf *b) {
  const uint8_t *s = config->ptr;
  size_t len = config->len;
  rs_trim(&s, &len);
  if (len == 0 || is_empty_json_object(s, len)) return true;
  rs_puts(b, "the " PLUGIN_NAME " plugin takes no configuration (expected an empty document or {}), "
             "but was given ");
  quote_config(b, s, len);
  return false;
}

// ---- decisions ----

// Which pods a Service selects: key NULL means every pod, else those whose label key has
// exactly the value.
typedef struct {
  const char *key;
  const string_t *value;
} selector_t;

static selector_t selector_for(const service_t *service) {
  const char *keys[] = {NAME_LABEL, APP_LABEL};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    const string_t *v = value(&service->labels, keys[i]);
    if (v) return (selector_t){keys[i], v};
  }
  return (selector_t){NULL, NULL};
}

static void exclude(decision_t *d, rs_buf *b) {
  d->tag = ISIM_NAD_ENDPOINTS_TYPES_DECISION_EXCLUDE;
  take(b, &d->val.exclude);
}

// network: the pod's readiness on the Service's network, or NULL (no prober).
static void decide(const service_t *service, selector_t sel, const pod_t *pod,
                   const network_t *network, decision_t *d, rs_buf *b) {
  if (sel.key) {
    const string_t *found = value(&pod->labels, sel.key);
    if (found && equals(found, (const char *)sel.value->ptr, sel.value->len)) {
      // selected
    } else if (found) {
      rs_puts(b, "pod label ");
      rs_puts(b, sel.key);
      rs_putc(b, '=');
      rs_put_debug(b, found->ptr, found->len);
      rs_puts(b, " does not match the Service's ");
      rs_put_debug(b, sel.value->ptr, sel.value->len);
      exclude(d, b);
      return;
    } else {
      rs_puts(b, "pod label ");
      rs_puts(b, sel.key);
      rs_puts(b, " is missing (the Service selects ");
      rs_puts(b, sel.key);
      rs_putc(b, '=');
      rs_put_debug(b, sel.value->ptr, sel.value->len);
      rs_putc(b, ')');
      exclude(d, b);
      return;
    }
  }
  // Kubernetes leaves out pods whose containers have stopped.
  if (pod->phase == ISIM_NAD_ENDPOINTS_TYPES_POD_PHASE_SUCCEEDED) {
    rs_puts(b, "pod phase is Succeeded");
    exclude(d, b);
    return;
  }
  if (pod->phase == ISIM_NAD_ENDPOINTS_TYPES_POD_PHASE_FAILED) {
    rs_puts(b, "pod phase is Failed");
    exclude(d, b);
    return;
  }
  bool serving = pod->ready;
  if (network && network->is_some &&
      network->val.status == ISIM_NAD_ENDPOINTS_POD_CONDITIONS_CONDITION_STATUS_FALSE) {
    serving = false;  // it does not answer on the Service's network
  }
  d->tag = ISIM_NAD_ENDPOINTS_TYPES_DECISION_INCLUDE;
  d->val.include.serving = serving;
  d->val.include.terminating = pod->terminating;
  d->val.include.ready = service->publish_not_ready_addresses || (serving && !pod->terminating);
}

// ---- exports ----

// Each pod is decided from the Service and its own labels, phase and readiness (on the primary
// network and on the Service's) alone, so the host asks about changed pods only.
exports_isim_nad_endpoints_decisions_decision_scope_t exports_isim_nad_endpoints_decisions_scope(
    void) {
  return EXPORTS_ISIM_NAD_ENDPOINTS_DECISIONS_DECISION_SCOPE_PER_POD;
}

// It reads network readiness (always given) and no other condition.
void exports_isim_nad_endpoints_condition_keys_condition_types(
    conditioned_endpoint_policy_list_string_t *ret) {
  ret->len = 0;
  ret->ptr = NULL;
}

void exports_isim_nad_endpoints_policy_info(exports_isim_nad_endpoints_policy_plugin_info_t *ret) {
  conditioned_endpoint_policy_string_dup(&ret->name, PLUGIN_NAME);
  conditioned_endpoint_policy_string_dup(&ret->version, PLUGIN_VERSION);
  ret->label_keys.len = 2;
  ret->label_keys.ptr = checked_malloc(2 * sizeof(string_t));
  conditioned_endpoint_policy_string_dup(&ret->label_keys.ptr[0], NAME_LABEL);
  conditioned_endpoint_policy_string_dup(&ret->label_keys.ptr[1], APP_LABEL);
  ret->annotation_keys.len = 0;
  ret->annotation_keys.ptr = NULL;
}

bool exports_isim_nad_endpoints_policy_validate_config(string_t *config, string_t *err) {
  rs_buf b = {0};
  bool ok = config_is_valid(config, &b);
  if (!ok) take(&b, err);
  free(b.ptr);
  conditioned_endpoint_policy_string_free(config);
  return ok;
}

bool exports_isim_nad_endpoints_policy_evaluate(
    exports_isim_nad_endpoints_policy_service_t *service,
    exports_isim_nad_endpoints_policy_list_pod_t *pods, string_t *config,
    exports_isim_nad_endpoints_policy_list_decision_t *ret, string_t *err) {
  rs_buf b = {0};
  bool ok = config_is_valid(config, &b);
  if (!ok) {
    take(&b, err);
  } else {
    selector_t sel = selector_for(service);
    // Each pod's readiness on the Service's network, in the pods' order.
    isim_nad_endpoints_pod_conditions_list_option_pod_condition_t network;
    isim_nad_endpoints_pod_conditions_network_readiness(&network);
    size_t included = 0;
    ret->len = pods->len;
    ret->ptr = pods->len ? checked_malloc(pods->len * sizeof(decision_t)) : NULL;
    for (size_t i = 0; i < pods->len; i++) {
      const network_t *of_pod = i < network.len ? &network.ptr[i] : NULL;
      decide(service, sel, &pods->ptr[i], of_pod, &ret->ptr[i], &b);
      included += ret->ptr[i].tag == ISIM_NAD_ENDPOINTS_TYPES_DECISION_INCLUDE;
    }
    isim_nad_endpoints_pod_conditions_list_option_pod_condition_free(&network);
    // One line a call, at debug level, as the Rust plugin logs it.
    rs_puts(&b, "evaluated ");
    rs_put_usize(&b, pods->len);
    rs_puts(&b, " pods: ");
    rs_put_usize(&b, included);
    rs_puts(&b, " included, ");
    rs_put_usize(&b, pods->len - included);
    rs_puts(&b, " excluded");
    string_t message = {b.ptr, b.len};  // borrowed by the import
    isim_nad_endpoints_log_log(ISIM_NAD_ENDPOINTS_LOG_LEVEL_DEBUG, &message);
  }
  free(b.ptr);
  exports_isim_nad_endpoints_policy_service_free(service);
  exports_isim_nad_endpoints_policy_list_pod_free(pods);
  conditioned_endpoint_policy_string_free(config);
  return ok;
}
