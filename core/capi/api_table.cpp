// ballast_get_api(): the function table, for engines that load libballast
// with dlopen() and must keep working with a newer one (ballast.h,
// "Versions"). One table serves every version up to ours: later versions
// only append members, so version N's struct is a prefix of ours.
#include <ballast/ballast.h>

namespace {

constexpr ballast_api_v8 kApi{
    {{{
         {
             {
                 {
                     {
                         BALLAST_C_API_VERSION,
                         ballast_status_code,
                         ballast_status_message,
                         ballast_status_free,
                         ballast_c_api_version,
                         ballast_library_version,
                         ballast_check_version,
                         ballast_set_log_sink,
                         ballast_model_open,
                         ballast_model_free,
                         ballast_model_format,
                         ballast_model_weight_count,
                         ballast_model_weight,
                         ballast_model_find_weight,
                         ballast_model_accounting,
                         ballast_model_dead_range,
                         ballast_model_read_weight,
                         ballast_backend_open,
                         ballast_backend_free,
                         ballast_backend_info,
                         ballast_backend_counters,
                         ballast_plan_derivations,
                         ballast_plan_free,
                         ballast_plan_count,
                         ballast_plan_entry,
                         ballast_residency_create,
                         ballast_residency_free,
                         ballast_residency_release,
                         ballast_residency_plan,
                         ballast_residency_group_count,
                         ballast_residency_stats_get,
                         ballast_residency_pin_derivation,
                         ballast_residency_pin_weight,
                         ballast_residency_pin_group,
                         ballast_residency_derive_all,
                         ballast_residency_prefetch,
                         ballast_residency_prefetch_group,
                         ballast_residency_wait_prefetches,
                         ballast_pin_free,
                         ballast_pin_count,
                         ballast_pin_value,
                         ballast_pin_read,
                         ballast_run_conformance,
                     },
                     ballast_model_retain,
                     ballast_model_weight_data,
                     ballast_plan_entry_layout,
                 },
                 ballast_derivation_kind_name,
             },
             ballast_residency_load,
         },
         ballast_backend_extension,
         ballast_plugin_extension,
     }},
     ballast_printable},
    ballast_model_note_count,
    ballast_model_note,
    ballast_residency_set_budget,
};

}  // namespace

extern "C" const void* ballast_get_api(uint32_t version) {
  return version >= 1 && version <= BALLAST_C_API_VERSION ? &kApi : nullptr;
}
