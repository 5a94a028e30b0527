/* leftover.c -- see leftover.h. */
#include "leftover.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int has_purlin(const char *s) {
  for (; *s; s++)
    if (strncasecmp(s, "purlin", 6) == 0)
      return 1;
  return 0;
}

static void add(lo_snap_t *s, const char *name) {
  if (lo_contains(s, name))
    return;
  char **v = realloc(s->name, (s->n + 1) * sizeof(char *));
  if (!v)
    return;
  s->name = v;
  s->name[s->n++] = strdup(name);
}

/* Non-directory entries of dir: those named *purlin* (all of them when `all`), and everything in
 * subdirectories named *purlin* (where the rendezvous keeps its secret id files). */
static void scan_dir(lo_snap_t *s, const char *dir, int all) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *e;
  char path[4096];
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    if (!all && !has_purlin(e->d_name))
      continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(path, &st) != 0 || st.st_uid != getuid())
      continue;
    if (S_ISDIR(st.st_mode)) {
      if (!all)
        scan_dir(s, path, 1);
      continue;
    }
    char name[4200];
    snprintf(name, sizeof name, "file:%s", path);
    add(s, name);
  }
  closedir(d);
}

/* Inode of a socket in /proc/net/unix whose path or abstract name contains "purlin". */
static int unix_sockets(lo_snap_t *s, const char *want, unsigned long *inode_out) {
  FILE *f = fopen("/proc/net/unix", "r");
  if (!f)
    return 0;
  char line[1024];
  int found = 0;
  if (!fgets(line, sizeof line, f)) { /* header */
    fclose(f);
    return 0;
  }
  while (fgets(line, sizeof line, f)) {
    unsigned long inode = 0;
    char path[600] = "";
    /* Num RefCount Protocol Flags Type St Inode [Path] */
    if (sscanf(line, "%*s %*s %*s %*s %*s %*s %lu %599s", &inode, path) < 1)
      continue;
    if (!path[0] || !has_purlin(path))
      continue;
    char name[640];
    snprintf(name, sizeof name, "sock:%s", path);
    if (s)
      add(s, name);
    if (want && strcmp(want, name) == 0) {
      *inode_out = inode;
      found = 1;
      break;
    }
  }
  fclose(f);
  return found;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

void lo_snapshot(lo_snap_t *s) {
  s->name = NULL;
  s->n = 0;
  scan_dir(s, "/dev/shm", 0);
  scan_dir(s, "/tmp", 0);
  const char *t = getenv("TMPDIR");
  if (t && *t && strcmp(t, "/tmp") != 0)
    scan_dir(s, t, 0);
  const char *x = getenv("XDG_RUNTIME_DIR");
  if (x && *x == '/')
    scan_dir(s, x, 0);
  unix_sockets(s, NULL, NULL);
  if (s->n)
    qsort(s->name, s->n, sizeof(char *), cmp_str);
}

void lo_free(lo_snap_t *s) {
  for (size_t i = 0; i < s->n; i++)
    free(s->name[i]);
  free(s->name);
  s->name = NULL;
  s->n = 0;
}

int lo_contains(const lo_snap_t *s, const char *name) {
  for (size_t i = 0; i < s->n; i++)
    if (strcmp(s->name[i], name) == 0)
      return 1;
  return 0;
}

static int numeric(const char *s) {
  if (!*s)
    return 0;
  for (; *s; s++)
    if (!isdigit((unsigned char)*s))
      return 0;
  return 1;
}

pid_t lo_holder(const char *name) {
  char target[700];
  int is_sock = strncmp(name, "sock:", 5) == 0;
  if (is_sock) {
    unsigned long inode = 0;
    if (!unix_sockets(NULL, name, &inode))
      return 0;
    snprintf(target, sizeof target, "socket:[%lu]", inode);
  } else {
    snprintf(target, sizeof target, "%s", name + 5);
  }
  DIR *proc = opendir("/proc");
  if (!proc)
    return 0;
  struct dirent *p;
  pid_t found = 0;
  char path[300], link[700];
  while (!found && (p = readdir(proc)) != NULL) {
    if (!numeric(p->d_name))
      continue;
    snprintf(path, sizeof path, "/proc/%s/fd", p->d_name);
    DIR *fds = opendir(path);
    if (fds) {
      struct dirent *fd;
      while ((fd = readdir(fds)) != NULL) {
        if (!numeric(fd->d_name))
          continue;
        char fpath[600];
        snprintf(fpath, sizeof fpath, "%s/%s", path, fd->d_name);
        ssize_t k = readlink(fpath, link, sizeof link - 1);
        if (k <= 0)
          continue;
        link[k] = 0;
        if (strcmp(link, target) == 0) {
          found = (pid_t)atoi(p->d_name);
          break;
        }
      }
      closedir(fds);
    }
    if (!found && !is_sock) { /* mapped without an fd */
      snprintf(path, sizeof path, "/proc/%s/maps", p->d_name);
      FILE *m = fopen(path, "r");
      if (m) {
        char line[1200];
        while (fgets(line, sizeof line, m))
          if (strstr(line, target)) {
            found = (pid_t)atoi(p->d_name);
            break;
          }
        fclose(m);
      }
    }
  }
  closedir(proc);
  return found;
}

int lo_children(pid_t parent, pid_t *pids, int max) {
  DIR *proc = opendir("/proc");
  if (!proc)
    return 0;
  struct dirent *p;
  int n = 0;
  while ((p = readdir(proc)) != NULL) {
    if (!numeric(p->d_name))
      continue;
    char path[300], buf[1024];
    snprintf(path, sizeof path, "/proc/%s/stat", p->d_name);
    FILE *f = fopen(path, "r");
    if (!f)
      continue;
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[k] = 0;
    char *rp = strrchr(buf, ')'); /* comm may contain spaces */
    char state = 0;
    int ppid = 0;
    if (!rp || sscanf(rp + 1, " %c %d", &state, &ppid) != 2)
      continue;
    if (ppid != parent || state == 'Z')
      continue;
    if (n < max)
      pids[n] = (pid_t)atoi(p->d_name);
    n++;
  }
  closedir(proc);
  return n;
}

void lo_comm(pid_t pid, char *buf, size_t len) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f || !fgets(buf, (int)len, f)) {
    snprintf(buf, len, "?");
  } else {
    buf[strcspn(buf, "\n")] = 0;
  }
  if (f)
    fclose(f);
}

void lo_exe(pid_t pid, char *buf, size_t len) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
  ssize_t k = readlink(path, buf, len - 1);
  buf[k > 0 ? k : 0] = 0;
}
