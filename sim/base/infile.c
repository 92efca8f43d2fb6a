/* infile.c - opening text inputs (see infile.h). */
#include "infile.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* err gets "path: cannot read the what: errno's reason"; fd is closed. */
static FILE *cannot_read(int fd, const char *path, const char *what,
                         vs_error *err)
{
  int e = errno;
  if (fd >= 0)
    close(fd);
  vs_error_set(err, VS_EIO, "%s: cannot read %s: %s", path, what, strerror(e));
  return NULL;
}

FILE *vs_open_input(const char *path, const char *what, vs_error *err)
{
  struct stat st;
  FILE *f;
  /* O_NONBLOCK: opening a FIFO for reading would wait for a writer */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0 || fstat(fd, &st) != 0)
    return cannot_read(fd, path, what, err);
  if (!S_ISREG(st.st_mode)) {
    vs_error_set(err, VS_EIO, "%s: %s, not a %s", path,
                 S_ISDIR(st.st_mode) ? "is a directory"
                                     : "not a regular file (a device, FIFO "
                                       "or socket)",
                 what);
    close(fd);
    return NULL;
  }
  if (!(f = fdopen(fd, "r")))
    return cannot_read(fd, path, what, err);
  return f;
}

size_t vs_utf8_bom_len(const char *text, size_t n)
{
  return n >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
}
