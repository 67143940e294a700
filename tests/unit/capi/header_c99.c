/* ballast.h is C99: this file compiles as strict C99 with every warning an
 * error (the build fails otherwise), and uses each struct once. */
#include <ballast/ballast.h>

int ballast_header_c99_check(void);
int ballast_header_c99_check(void) {
  ballast_weight_info w = BALLAST_INIT(ballast_weight_info);
  ballast_residency_options o = BALLAST_INIT(ballast_residency_options);
  ballast_api_v1 api = {0};
  (void)api;
  return (int)(w.size + o.size) + (ballast_status_code(NULL) == BALLAST_OK);
}
