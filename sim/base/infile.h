/* infile.h - the one way vsim and vsim-calibrate open a text input (a
 * workload, a topology, a Hugging Face config.json, a raw calibration CSV)
 * and the one rule for what leads its text. */
#ifndef VS_INFILE_H
#define VS_INFILE_H

#include "error.h"

#include <stddef.h>
#include <stdio.h>

/* Opens the input file path ("the `what`", e.g. "workload file") to read
 * it as text. It must be a regular file: a directory reads as an empty
 * file, a FIFO or a pipe would wait for a writer (it is opened without
 * waiting, then refused) and a device may never end. NULL with VS_EIO in
 * err, naming path and what, when it is none or cannot be opened. */
FILE *vs_open_input(const char *path, const char *what, vs_error *err);

/* The bytes of the UTF-8 byte-order mark that text[0 .. n) starts with:
 * 3, or 0 without one. Editors and spreadsheets write one; every reader
 * skips it (RFC 8259, section 8.1, allows JSON parsers to). */
size_t vs_utf8_bom_len(const char *text, size_t n);

#endif
