/* leftover_check -- run before and after the host suite (ctest fixtures):
 *   leftover_check snapshot FILE   record what purlin-looking files and sockets exist now
 *   leftover_check check FILE DIR  fail if anything new is still there: a file in /dev/shm, /tmp or
 *                                  $TMPDIR named *purlin* that no process holds, a file or Unix
 *                                  socket named *purlin* held by a process whose executable lies
 *                                  under DIR (this build tree), or such a process still running.
 * Entries held by programs outside DIR belong to another run going on at the same time (another
 * build tree, a user's job) and are ignored. The check runs alone (RUN_SERIAL), after every test
 * that uses the fixture has finished. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "leftover.h"

static int snapshot(const char *file) {
  lo_snap_t s;
  lo_snapshot(&s);
  FILE *f = fopen(file, "w");
  if (!f) {
    perror(file);
    return 2;
  }
  for (size_t i = 0; i < s.n; i++)
    fprintf(f, "%s\n", s.name[i]);
  fclose(f);
  printf("leftover_check: %zu existing entries recorded\n", s.n);
  lo_free(&s);
  return 0;
}

static const char *g_dir = "";

static int under_dir(pid_t pid) {
  char exe[4096];
  size_t n = strlen(g_dir);
  lo_exe(pid, exe, sizeof exe);
  return n > 0 && strncmp(exe, g_dir, n) == 0 && (exe[n] == '/' || exe[n] == 0);
}

/* Processes of this build tree still running (not this one). */
static int stray_processes(void) {
  DIR *proc = opendir("/proc");
  if (!proc)
    return 0;
  struct dirent *e;
  int found = 0;
  while ((e = readdir(proc)) != NULL) {
    int pid = atoi(e->d_name);
    if (pid <= 0 || pid == getpid())
      continue;
    if (!under_dir(pid))
      continue;
    char comm[64];
    lo_comm(pid, comm, sizeof comm);
    printf("FAIL leftover process %d (%s) of this build still running\n", pid, comm);
    found++;
  }
  closedir(proc);
  return found;
}

static int check(const char *file) {
  lo_snap_t before = {0}, now;
  FILE *f = fopen(file, "r");
  char line[4400];
  if (f) {
    while (fgets(line, sizeof line, f)) {
      line[strcspn(line, "\n")] = 0;
      char **v = realloc(before.name, (before.n + 1) * sizeof(char *));
      if (!v)
        break;
      before.name = v;
      before.name[before.n++] = strdup(line);
    }
    fclose(f);
  } else {
    printf("leftover_check: no snapshot %s: everything counts as new\n", file);
  }
  int bad = stray_processes();
  for (int attempt = 0; attempt < 3; attempt++) {
    lo_snapshot(&now);
    int found = 0;
    for (size_t i = 0; i < now.n; i++) {
      if (lo_contains(&before, now.name[i]))
        continue;
      pid_t h = lo_holder(now.name[i]);
      if (h > 0 && !under_dir(h))
        continue; /* another run's, in use */
      found++;
      if (attempt == 2) {
        char comm[64] = "";
        if (h > 0)
          lo_comm(h, comm, sizeof comm);
        printf("FAIL left behind: %s%s%s%s\n", now.name[i], h > 0 ? " (held by " : "",
               h > 0 ? comm : "", h > 0 ? ")" : "");
        bad++;
      }
    }
    lo_free(&now);
    if (!found)
      break;
    sleep(1);
  }
  lo_free(&before);
  printf("leftover_check: %s\n", bad ? "FAILED" : "nothing left behind");
  return bad ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "snapshot") == 0)
    return snapshot(argv[2]);
  if (argc == 4 && strcmp(argv[1], "check") == 0) {
    g_dir = argv[3];
    return check(argv[2]);
  }
  fprintf(stderr, "usage: leftover_check snapshot FILE | check FILE BUILDDIR\n");
  return 2;
}
