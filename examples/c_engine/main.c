/* A C99 engine on ballast's C API (include/ballast/ballast.h): open a
 * model, open a backend chosen by a config string, load it cold (the
 * referenced bytes read from storage, derived as they arrive), page its
 * weights under the auto budget one layer at a time, derive every planned encoding,
 * read a transposed weight back (where the plan has one) and check it
 * element by element against the weight as stored, print the stats,
 * release, and prove the device counters are back where they started.
 * MODEL is ONNX, safetensors or GGUF.
 *
 *   c_engine MODEL BACKEND [LAYER_STEM]   e.g. c_engine sample.onnx vulkan, c_engine llama.gguf cpu blk
 * Exit: 0 ok, 1 a step failed or a check did not hold, 2 usage. */
#include <ballast/ballast.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A model's bytes (a weight's name, a message quoting one) as the ballast
 * command shows them: a name may hold a carriage return or an escape
 * sequence, so it is escaped before it reaches the terminal. Sized by a
 * query first, so no name is too long; the caller frees it (NULL when
 * memory ran out). Each call has its own, for the log sink runs on the
 * library's threads too. */
static char* shown(const char* text) {
  size_t needed = 0;
  char* out;
  ballast_status* s = ballast_printable(text, strlen(text), NULL, 0, &needed);
  if (s != NULL || (out = malloc(needed + 1)) == NULL) {
    ballast_status_free(s);
    return NULL;
  }
  s = ballast_printable(text, strlen(text), out, needed + 1, NULL);
  if (s != NULL) {
    ballast_status_free(s);
    free(out);
    return NULL;
  }
  return out;
}
#define OR_UNSHOWN(p) ((p) != NULL ? (p) : "(out of memory)")

/* Prints a failed call's message and frees it; 1 when the call failed. */
static int failed(ballast_status* s, const char* what) {
  char* message;
  if (s == NULL) return 0;
  message = shown(ballast_status_message(s));
  fprintf(stderr, "c_engine: %s: %s\n", what, OR_UNSHOWN(message));
  free(message);
  ballast_status_free(s);
  return 1;
}
#define TRY(call) do { if (failed((call), #call)) return 1; } while (0)

static void log_sink(void* user, ballast_log_level level, const char* source, const char* text) {
  char* escaped = shown(text); /* ballast_printable may be called from a sink (ballast.h) */
  (void)user;
  fprintf(stderr, "[ballast %s] %s: %s\n",
          level == BALLAST_LOG_ERROR     ? "error"
          : level == BALLAST_LOG_WARNING ? "warning"
                                         : "info",
          source, OR_UNSHOWN(escaped));
  free(escaped);
}

static void progress(void* user, size_t done, size_t total) {
  (void)user;
  if (done == total) printf("derived %zu of %zu\n", done, total);
}

/* The first 2-D float32 weight the plan transposes; (size_t)-1 when none. */
static size_t find_transpose(const ballast_model* model, const ballast_plan* plan, size_t* weight) {
  size_t n = 0, i;
  if (failed(ballast_plan_count(plan, &n), "plan count")) return (size_t)-1;
  for (i = 0; i < n; ++i) {
    ballast_derivation_info d = BALLAST_INIT(ballast_derivation_info);
    ballast_weight_info w = BALLAST_INIT(ballast_weight_info);
    if (failed(ballast_plan_entry(plan, i, &d), "plan entry") || strcmp(d.kind, "transpose") != 0) continue;
    if (failed(ballast_model_find_weight(model, d.weight, weight), "find weight")) continue;
    if (failed(ballast_model_weight(model, *weight, &w), "weight")) continue;
    if (strcmp(w.dtype, "float") == 0 && w.ndims == 2) return i;
  }
  return (size_t)-1;
}

/* Pins derivation `entry` (the transpose of weight `weight`) and compares
 * it element by element with the weight as stored; 0 when they agree. */
static int check_transpose(const ballast_model* model, ballast_residency* residency, const ballast_plan* plan,
                           size_t entry, size_t weight) {
  ballast_weight_info w = BALLAST_INIT(ballast_weight_info);
  ballast_value value = BALLAST_INIT(ballast_value);
  ballast_pin* pin = NULL;
  float *stored, *transposed;
  char* name;
  size_t r, c, mismatches = 0;
  TRY(ballast_model_weight(model, weight, &w));
  TRY(ballast_residency_pin_derivation(residency, plan, entry, &pin));
  TRY(ballast_pin_value(pin, 0, &value));
  if (value.first_bytes != w.bytes) {
    name = shown(w.name);
    fprintf(stderr, "c_engine: transpose of %s has %llu bytes, the weight %llu\n", OR_UNSHOWN(name),
            (unsigned long long)value.first_bytes, (unsigned long long)w.bytes);
    free(name);
    return 1;
  }
  stored = malloc((size_t)w.bytes);
  transposed = malloc((size_t)w.bytes);
  if (stored == NULL || transposed == NULL) return 1;
  TRY(ballast_model_read_weight(model, weight, 0, stored, (size_t)w.bytes, w.bytes));
  TRY(ballast_pin_read(pin, 0, 0, 0, transposed, (size_t)w.bytes, w.bytes));
  TRY(ballast_pin_free(pin));
  for (r = 0; r < (size_t)w.dims[0]; ++r)
    for (c = 0; c < (size_t)w.dims[1]; ++c)
      if (memcmp(&transposed[c * (size_t)w.dims[0] + r], &stored[r * (size_t)w.dims[1] + c], sizeof(float)) != 0)
        ++mismatches;
  name = shown(w.name);
  printf("transpose of %s [%lld, %lld]: %zu mismatches; first byte 0x%02x, expected 0x%02x\n", OR_UNSHOWN(name),
         (long long)w.dims[0], (long long)w.dims[1], mismatches, ((unsigned char*)transposed)[0],
         ((unsigned char*)stored)[0]);
  free(name);
  free(stored);
  free(transposed);
  return mismatches == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  ballast_model* model = NULL;
  ballast_backend* backend = NULL;
  ballast_plan* plan = NULL;
  ballast_residency* residency = NULL;
  ballast_pin* pin = NULL;
  ballast_device_info device = BALLAST_INIT(ballast_device_info);
  ballast_accounting acc = BALLAST_INIT(ballast_accounting);
  ballast_device_counters before = BALLAST_INIT(ballast_device_counters), after = BALLAST_INIT(ballast_device_counters);
  ballast_residency_options options = BALLAST_INIT(ballast_residency_options);
  ballast_residency_stats stats = BALLAST_INIT(ballast_residency_stats);
  ballast_teardown teardown = BALLAST_INIT(ballast_teardown);
  ballast_load_report loaded = BALLAST_INIT(ballast_load_report);
  size_t weights = 0, groups = 0, entry, weight = 0, g;

  if (argc != 3 && argc != 4) {
    fprintf(stderr, "usage: %s MODEL BACKEND [LAYER_STEM]\n", argv[0]);
    return 2;
  }
  TRY(ballast_check_version(7)); /* this engine needs version 7 (ballast_printable) or later */
  TRY(ballast_set_log_sink(log_sink, NULL));

  TRY(ballast_model_open(argv[1], &model));
  TRY(ballast_model_weight_count(model, &weights));
  TRY(ballast_model_accounting(model, &acc));
  printf("model: %zu weights; mapped %llu B, referenced %llu B, dead %llu B in %zu range(s)\n", weights,
         (unsigned long long)acc.mapped_bytes, (unsigned long long)acc.referenced_bytes,
         (unsigned long long)acc.dead_bytes, acc.dead_ranges);

  TRY(ballast_backend_open(argv[2], &backend));
  TRY(ballast_backend_info(backend, &device));
  printf("backend %s: %s (%s), host registration %s\n", argv[2], device.name, device.uuid,
         device.host_registration ? "yes" : "no");
  TRY(ballast_backend_counters(backend, &before));

  /* Paged under the auto budget, one group per layer. */
  TRY(ballast_plan_derivations(model, BALLAST_PLAN_AUTOMATIC, &plan));
  options.strategy = BALLAST_PAGED;
  options.plan = plan;
  options.group_by_layer = argc == 4 ? argv[3] : "layer";
  TRY(ballast_residency_create(backend, model, &options, &residency));
  /* The cold start: what the budget holds, read from storage in large
   * parallel reads and derived as it arrives, before the first request. */
  TRY(ballast_residency_load(residency, NULL, &loaded));
  printf(
      "cold start: %llu of %llu planned bytes read (%llu cached), %llu derived, %llu left for demand, "
      "page cache %s\n",
      (unsigned long long)loaded.read_bytes, (unsigned long long)loaded.planned_bytes,
      (unsigned long long)loaded.cached_bytes, (unsigned long long)loaded.derived_built,
      (unsigned long long)loaded.left_for_demand, loaded.cache == BALLAST_CACHE_KEEP ? "kept" : "dropped");
  TRY(ballast_residency_group_count(residency, &groups));
  for (g = 0; g < groups; ++g) { /* a decode loop's walk: prefetch the next layer, pin this one */
    if (g + 1 < groups) TRY(ballast_residency_prefetch_group(residency, g + 1));
    TRY(ballast_residency_pin_group(residency, g, 5000, &pin));
    TRY(ballast_pin_free(pin));
  }
  TRY(ballast_residency_wait_prefetches(residency));
  TRY(ballast_residency_derive_all(residency, plan, progress, NULL));

  /* One value read back and checked against the weight as stored: the
   * first 2-D float32 weight the plan transposes. A model without one (a
   * GGUF model of quantized blocks) has nothing this check can read. */
  entry = find_transpose(model, plan, &weight);
  if (entry == (size_t)-1) {
    printf("read-back check: none (the plan transposes no 2-D float32 weight)\n");
  } else if (check_transpose(model, residency, plan, entry, weight) != 0) {
    return 1;
  }

  TRY(ballast_residency_stats_get(residency, &stats));
  printf("paged, budget %llu B: peak %llu B, %llu page-ins, %llu builds, %llu prefetches, %llu evictions\n",
         (unsigned long long)stats.budget_bytes, (unsigned long long)stats.peak_device_bytes,
         (unsigned long long)stats.page_ins, (unsigned long long)stats.derived_builds,
         (unsigned long long)stats.prefetches,
         (unsigned long long)(stats.source_evictions + stats.derived_evictions));
  TRY(ballast_residency_release(residency, &teardown));
  printf("teardown: %llu bytes in %llu allocations freed, %llu failed\n", (unsigned long long)teardown.bytes_freed,
         (unsigned long long)teardown.allocations_freed, (unsigned long long)teardown.failed_frees);
  TRY(ballast_backend_counters(backend, &after));
  if (after.live_allocations != before.live_allocations || after.live_bytes != before.live_bytes ||
      after.live_registrations != before.live_registrations || stats.peak_device_bytes > stats.budget_bytes) {
    fprintf(stderr, "c_engine: device counters not back to baseline\n");
    return 1;
  }
  printf("counters back to baseline: ok\n");
  TRY(ballast_residency_free(residency));
  TRY(ballast_plan_free(plan));
  TRY(ballast_backend_free(backend));
  TRY(ballast_model_free(model));
  TRY(ballast_set_log_sink(NULL, NULL));
  printf("c engine: ok\n");
  return 0;
}
