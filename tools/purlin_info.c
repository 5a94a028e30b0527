/* purlin-info -- print purlin's version, build and every PURLIN_* setting with the value in force.
 */
#include <stdio.h>
#include <string.h>

#include "param.h"
#include "purlin.h"

static void usage(FILE *out) {
  fprintf(out, "usage: purlin-info [--help]\n"
               "\n"
               "Print purlin's version, its build, and every PURLIN_* environment setting: the\n"
               "value in force, the default, where the value comes from (env or default) and what\n"
               "it does. Set the variables in the environment to change them, e.g.\n"
               "  PURLIN_DEBUG=INFO PURLIN_TIMEOUT_MS=30000 purlin-info\n");
}

static void print_version(const char *what, int v) {
  printf("%-10s %d.%d.%d\n", what, v / 10000, v / 100 % 100, v % 100);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    }
    fprintf(stderr, "purlin-info: unknown argument '%s'\n", argv[i]);
    usage(stderr);
    return 2;
  }

  int version = 0;
  purlin_status_t st = purlin_get_version(&version);
  if (st != PURLIN_OK) {
    fprintf(stderr, "purlin-info: purlin_get_version: %s\n", purlin_status_string(st));
    return 1;
  }
  print_version("library", version);
  print_version("headers", PURLIN_VERSION);
  if (version != PURLIN_VERSION) {
    printf("warning: the library loaded is not the one this tool was built against\n");
  }
  /* Whether CUDA was compiled in is private to the library target; the public API reports the
   * datapath per communicator only. */
  printf("%-10s CUDA compiled in: not reported by the public API (a communicator's datapath: "
         "purlin_comm_datapath)\n",
         "build");
  printf("\n");
  pl_param_print(stdout);
  return 0;
}
