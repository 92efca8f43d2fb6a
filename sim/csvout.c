/* csvout.c - atomic CSV output through libcsv (see csvout.h). */
#include "csvout.h"

#include <csv.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int vs_csv_open(vs_csv *csv, const char *path, vs_error *err)
{
  int fd = -1;
  memset(csv, 0, sizeof *csv);
  if (snprintf(csv->path, sizeof csv->path, "%s", path) >= (int)sizeof csv->path)
    return vs_error_set(err, VS_EIO, "%s: path too long", path);
  /* A name unique to this process and this vs_csv, created with O_EXCL and
   * mode 0666 so that the user's umask applies (mkstemp would make 0600). */
  for (unsigned attempt = 0; fd < 0 && attempt < 100; attempt++) {
    if (snprintf(csv->tmp_path, sizeof csv->tmp_path, "%s.tmp.%ld.%lx.%u",
                 path, (long)getpid(), (unsigned long)(uintptr_t)csv,
                 attempt) >= (int)sizeof csv->tmp_path)
      return vs_error_set(err, VS_EIO, "%s: path too long", path);
    fd = open(csv->tmp_path, O_WRONLY | O_CREAT | O_EXCL, 0666);
    if (fd < 0 && errno != EEXIST)
      break;
  }
  if (fd < 0) {
    int e = errno;
    csv->tmp_path[0] = '\0';
    return vs_error_set(err, VS_EIO, "%s: cannot create: %s", path, strerror(e));
  }
  csv->f = fdopen(fd, "w");
  if (!csv->f) {
    int e = errno;
    close(fd);
    unlink(csv->tmp_path);
    csv->tmp_path[0] = '\0';
    return vs_error_set(err, VS_EIO, "%s: cannot write: %s", path, strerror(e));
  }
  return 0;
}

static void separator(vs_csv *csv)
{
  if (csv->n_fields++ > 0 && fputc(',', csv->f) == EOF)
    csv->failed = true;
}

void vs_csv_text(vs_csv *csv, const char *text)
{
  separator(csv);
  if (strpbrk(text, ",\"\r\n")) {
    if (csv_fwrite(csv->f, text, strlen(text)) != 0)
      csv->failed = true;
  } else if (fputs(text, csv->f) == EOF) {
    csv->failed = true;
  }
}

void vs_csv_u64(vs_csv *csv, uint64_t value)
{
  separator(csv);
  if (fprintf(csv->f, "%llu", (unsigned long long)value) < 0)
    csv->failed = true;
}

void vs_csv_i64(vs_csv *csv, int64_t value)
{
  separator(csv);
  if (fprintf(csv->f, "%lld", (long long)value) < 0)
    csv->failed = true;
}

void vs_csv_real(vs_csv *csv, double value)
{
  separator(csv);
  if (fprintf(csv->f, "%.9g", value) < 0)
    csv->failed = true;
}

void vs_csv_seconds(vs_csv *csv, double seconds)
{
  separator(csv);
  if (fprintf(csv->f, "%.9f", seconds) < 0)
    csv->failed = true;
}

void vs_csv_row(vs_csv *csv)
{
  if (fputc('\n', csv->f) == EOF)
    csv->failed = true;
  csv->n_fields = 0;
}

void vs_csv_header(vs_csv *csv, const char *names)
{
  char name[128];
  const char *p = names;
  while (*p) {
    size_t n = strcspn(p, ",");
    if (n >= sizeof name)
      n = sizeof name - 1;
    memcpy(name, p, n);
    name[n] = '\0';
    vs_csv_text(csv, name);
    p += strcspn(p, ",");
    if (*p == ',')
      p++;
  }
  vs_csv_row(csv);
}

int vs_csv_commit(vs_csv *csv, vs_error *err)
{
  int e = 0;
  errno = 0;
  if (fflush(csv->f) != 0 || ferror(csv->f) || csv->failed)
    e = errno ? errno : EIO;
  if (fclose(csv->f) != 0 && !e)
    e = errno;
  csv->f = NULL;
  if (!e && rename(csv->tmp_path, csv->path) != 0)
    e = errno;
  if (e) {
    unlink(csv->tmp_path);
    return vs_error_set(err, VS_EIO, "%s: write failed: %s", csv->path,
                        strerror(e));
  }
  return 0;
}

void vs_csv_abort(vs_csv *csv)
{
  if (csv->f) {
    fclose(csv->f);
    csv->f = NULL;
  }
  if (csv->tmp_path[0])
    unlink(csv->tmp_path);
}

int vs_make_dir(const char *dir, vs_error *err)
{
  struct stat st;
  if (stat(dir, &st) == 0) {
    if (S_ISDIR(st.st_mode))
      return 0;
    return vs_error_set(err, VS_EIO, "%s: exists and is not a directory", dir);
  }
  if (mkdir(dir, 0777) != 0)
    return vs_error_set(err, VS_EIO, "%s: cannot create directory: %s", dir,
                        strerror(errno));
  return 0;
}
