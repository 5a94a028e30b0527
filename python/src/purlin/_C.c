/*
 * _C.c -- the CPython extension over the purlin C library (include/purlin.h).
 *
 * Two halves:
 *   - Comm: a communicator object whose collectives take raw addresses (Python ints), element counts
 *     and purlin dtype/op codes. The GIL is released while a call runs: on the host datapath a call
 *     blocks until this rank's part is done, and other Python threads must keep running meanwhile.
 *   - inspect(): turns an array-like object into (address, dtype, count, shape, device, ...) through
 *     the protocols that need no third-party header: __array_interface__ (numpy, with ml_dtypes'
 *     bfloat16/fp8 recognised by name), DLPack (__dlpack__, CuPy, JAX, ...), __cuda_array_interface__
 *     (Numba, CuPy) and the buffer protocol (bytearray, array.array, memoryview). torch tensors are
 *     read in Python (purlin/_arrays.py) through their own attributes: cheaper, and safe under CUDA
 *     graph capture and torch.compile.
 * Errors from the C library become purlin.PurlinError with .status (the status name), .code (the
 * number) and .text (purlin_comm_last_error); argument errors found here are TypeError/ValueError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "purlin.h"

static PyObject *PurlinError; /* purlin.PurlinError, a RuntimeError */

/* ---- errors ------------------------------------------------------------------------------------ */

/* Raise PurlinError for `st` returned by `what`, with the communicator's (or the thread's) text. */
static PyObject *raise_status(purlin_status_t st, const char *what, purlin_comm_t comm) {
  const char *text = purlin_comm_last_error(comm);
  PyObject *msg = PyUnicode_FromFormat("%s failed: %s (%s)%s%s", what, purlin_status_name(st),
                                       purlin_status_string(st), text[0] ? ": " : "", text);
  if (!msg) return NULL;
  PyObject *exc = PyObject_CallOneArg(PurlinError, msg);
  Py_DECREF(msg);
  if (!exc) return NULL;
  PyObject *name = PyUnicode_FromString(purlin_status_name(st));
  PyObject *code = PyLong_FromLong((long)st);
  PyObject *txt = PyUnicode_FromString(text);
  if (name && code && txt && PyObject_SetAttrString(exc, "status", name) == 0 &&
      PyObject_SetAttrString(exc, "code", code) == 0 &&
      PyObject_SetAttrString(exc, "text", txt) == 0)
    PyErr_SetObject(PurlinError, exc);
  Py_XDECREF(name);
  Py_XDECREF(code);
  Py_XDECREF(txt);
  Py_DECREF(exc);
  return NULL;
}

/* ---- the communicator object ------------------------------------------------------------------- */

typedef struct {
  PyObject_HEAD purlin_comm_t comm;
  int busy; /* calls in flight (GIL released): destroy must not free under them */
} CommObject;

static PyTypeObject CommType;

static int comm_ok(CommObject *self) {
  if (self->comm) return 1;
  PyErr_SetString(PyExc_RuntimeError,
                  "purlin: the communicator was finalized (call purlin.init() again)");
  return 0;
}

static void comm_dealloc(CommObject *self) {
  /* A communicator dropped without finalize(): destroy it (local only, waits for nothing). */
  if (self->comm && !self->busy) purlin_comm_destroy(self->comm);
  self->comm = NULL;
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Fill a purlin_config_t from the keyword arguments shared by both init functions. */
static int fill_config(purlin_config_t *cfg, int datapath, int device, int timeout_ms,
                       unsigned long long staging, const char *name) {
  purlin_config_t init = PURLIN_CONFIG_INIT;
  *cfg = init;
  cfg->datapath = (purlin_datapath_t)datapath;
  cfg->device = device;
  cfg->timeout_ms = timeout_ms;
  cfg->staging_bytes = (size_t)staging;
  cfg->name = name;
  return 0;
}

static PyObject *new_comm(purlin_comm_t c) {
  CommObject *o = PyObject_New(CommObject, &CommType);
  if (!o) {
    purlin_comm_destroy(c);
    return NULL;
  }
  o->comm = c;
  o->busy = 0;
  return (PyObject *)o;
}

static PyObject *py_comm_init_env(PyObject *mod, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"datapath", "device", "timeout_ms", "staging_bytes", "name", NULL};
  int datapath = PURLIN_DATAPATH_AUTO, device = -1, timeout_ms = 0;
  unsigned long long staging = 0;
  const char *name = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|iiiKz", kwl, &datapath, &device, &timeout_ms,
                                   &staging, &name))
    return NULL;
  purlin_config_t cfg;
  fill_config(&cfg, datapath, device, timeout_ms, staging, name);
  purlin_comm_t c = NULL;
  purlin_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = purlin_comm_init_env(&c, &cfg);
  Py_END_ALLOW_THREADS
  if (st) return raise_status(st, "purlin_comm_init_env", NULL);
  return new_comm(c);
}

static PyObject *py_comm_init_rank(PyObject *mod, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"nranks", "unique_id", "rank", "datapath", "device",
                        "timeout_ms", "staging_bytes", "name", NULL};
  int nranks, rank, datapath = PURLIN_DATAPATH_AUTO, device = -1, timeout_ms = 0;
  unsigned long long staging = 0;
  const char *name = NULL;
  Py_buffer idb;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "iy*i|iiiKz", kwl, &nranks, &idb, &rank, &datapath,
                                   &device, &timeout_ms, &staging, &name))
    return NULL;
  purlin_unique_id_t id;
  if (idb.len != (Py_ssize_t)sizeof id.internal) {
    PyErr_Format(PyExc_ValueError,
                 "unique_id must be the %d bytes returned by purlin.get_unique_id(); got %zd bytes",
                 (int)sizeof id.internal, idb.len);
    PyBuffer_Release(&idb);
    return NULL;
  }
  memcpy(id.internal, idb.buf, sizeof id.internal);
  PyBuffer_Release(&idb);
  purlin_config_t cfg;
  fill_config(&cfg, datapath, device, timeout_ms, staging, name);
  purlin_comm_t c = NULL;
  purlin_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = purlin_comm_init_rank(&c, nranks, id, rank, &cfg);
  Py_END_ALLOW_THREADS
  if (st) return raise_status(st, "purlin_comm_init_rank", NULL);
  return new_comm(c);
}

static PyObject *py_get_unique_id(PyObject *mod, PyObject *unused) {
  purlin_unique_id_t id;
  purlin_status_t st = purlin_get_unique_id(&id);
  if (st) return raise_status(st, "purlin_get_unique_id", NULL);
  return PyBytes_FromStringAndSize(id.internal, sizeof id.internal);
}

static PyObject *comm_destroy(CommObject *self, PyObject *unused) {
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError,
                    "purlin.finalize: a collective is still running on this communicator in "
                    "another thread");
    return NULL;
  }
  if (self->comm) {
    purlin_comm_t c = self->comm;
    self->comm = NULL;
    Py_BEGIN_ALLOW_THREADS
    purlin_comm_destroy(c);
    Py_END_ALLOW_THREADS
  }
  Py_RETURN_NONE;
}

static PyObject *comm_abort(CommObject *self, PyObject *unused) {
  if (!comm_ok(self)) return NULL;
  purlin_status_t st = purlin_comm_abort(self->comm);
  if (st) return raise_status(st, "purlin_comm_abort", self->comm);
  Py_RETURN_NONE;
}

static PyObject *comm_last_error(CommObject *self, PyObject *unused) {
  return PyUnicode_FromString(purlin_comm_last_error(self->comm));
}

/* The first asynchronous error as a status name, or None. */
static PyObject *comm_async_error(CommObject *self, PyObject *unused) {
  if (!comm_ok(self)) return NULL;
  purlin_status_t s = PURLIN_OK, st = purlin_comm_get_async_error(self->comm, &s);
  if (st) return raise_status(st, "purlin_comm_get_async_error", self->comm);
  if (s == PURLIN_OK) Py_RETURN_NONE;
  return PyUnicode_FromString(purlin_status_name(s));
}

static PyObject *comm_get_int(CommObject *self, int which) {
  if (!comm_ok(self)) return NULL;
  int v = 0;
  purlin_datapath_t dp = PURLIN_DATAPATH_AUTO;
  purlin_status_t st = which == 0   ? purlin_comm_rank(self->comm, &v)
                       : which == 1 ? purlin_comm_size(self->comm, &v)
                                    : purlin_comm_datapath(self->comm, &dp);
  if (st) return raise_status(st, "purlin_comm_rank/size/datapath", self->comm);
  return PyLong_FromLong(which == 2 ? (long)dp : (long)v);
}
static PyObject *comm_rank(CommObject *self, void *c) { return comm_get_int(self, 0); }
static PyObject *comm_size(CommObject *self, void *c) { return comm_get_int(self, 1); }
static PyObject *comm_datapath(CommObject *self, void *c) { return comm_get_int(self, 2); }

static PyObject *comm_mem_alloc(CommObject *self, PyObject *arg) {
  if (!comm_ok(self)) return NULL;
  unsigned long long bytes = PyLong_AsUnsignedLongLong(arg);
  if (PyErr_Occurred()) return NULL;
  void *p = NULL;
  purlin_status_t st;
  self->busy++;
  Py_BEGIN_ALLOW_THREADS
  st = purlin_mem_alloc(self->comm, (size_t)bytes, &p);
  Py_END_ALLOW_THREADS
  self->busy--;
  if (st) return raise_status(st, "purlin_mem_alloc", self->comm);
  return PyLong_FromVoidPtr(p);
}

/* purlin_mem_free / purlin_mem_deregister(comm, address): one pointer, the GIL released. */
static PyObject *comm_ptr_call(CommObject *self, PyObject *arg,
                               purlin_status_t (*fn)(purlin_comm_t, void *), const char *name) {
  if (!comm_ok(self)) return NULL;
  void *p = PyLong_AsVoidPtr(arg);
  if (PyErr_Occurred()) return NULL;
  purlin_status_t st;
  self->busy++;
  Py_BEGIN_ALLOW_THREADS
  st = fn(self->comm, p);
  Py_END_ALLOW_THREADS
  self->busy--;
  if (st) return raise_status(st, name, self->comm);
  Py_RETURN_NONE;
}

static PyObject *comm_mem_free(CommObject *self, PyObject *arg) {
  return comm_ptr_call(self, arg, purlin_mem_free, "purlin_mem_free");
}

static PyObject *comm_mem_register(CommObject *self, PyObject *args) {
  if (!comm_ok(self)) return NULL;
  unsigned long long addr, bytes;
  if (!PyArg_ParseTuple(args, "KK", &addr, &bytes)) return NULL;
  purlin_status_t st;
  self->busy++;
  Py_BEGIN_ALLOW_THREADS
  st = purlin_mem_register(self->comm, (void *)(uintptr_t)addr, (size_t)bytes);
  Py_END_ALLOW_THREADS
  self->busy--;
  if (st) return raise_status(st, "purlin_mem_register", self->comm);
  Py_RETURN_NONE;
}

static PyObject *comm_mem_deregister(CommObject *self, PyObject *arg) {
  return comm_ptr_call(self, arg, purlin_mem_deregister, "purlin_mem_deregister");
}

/* ---- collectives ------------------------------------------------------------------------------ */

/* An address from a Python int (0 allowed). */
static int conv_ptr(PyObject *o, void *out) {
  if (o == Py_None) {
    *(void **)out = NULL;
    return 1;
  }
  void *p = PyLong_AsVoidPtr(o);
  if (!p && PyErr_Occurred()) return 0;
  *(void **)out = p;
  return 1;
}

/* Counts: either a sequence of ints in host memory (copied into `host`), or, when on_device, an
 * int: the address of a device array of size_t. */
typedef struct {
  size_t host[256];
  const size_t *ptr;
} counts_t;

static int get_counts(CommObject *self, PyObject *o, int on_device, const char *name,
                      counts_t *c) {
  if (on_device) {
    c->ptr = (const size_t *)PyLong_AsVoidPtr(o);
    return !(c->ptr == NULL && PyErr_Occurred());
  }
  int world = 0;
  purlin_comm_size(self->comm, &world);
  PyObject *seq = PySequence_Fast(o, "counts must be a sequence of ints");
  if (!seq) return 0;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (n != world || n > 256) {
    PyErr_Format(PyExc_ValueError, "%s has %zd entries; it needs one per rank (%d)", name, n,
                 world);
    Py_DECREF(seq);
    return 0;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    unsigned long long v = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seq, i));
    if (PyErr_Occurred()) {
      Py_DECREF(seq);
      return 0;
    }
    c->host[i] = (size_t)v;
  }
  Py_DECREF(seq);
  c->ptr = c->host;
  return 1;
}

#define RUN_CALL(self, fname, expr)                                                                \
  do {                                                                                             \
    purlin_status_t st_;                                                                           \
    self->busy++;                                                                                  \
    Py_BEGIN_ALLOW_THREADS                                                                         \
    st_ = (expr);                                                                                  \
    Py_END_ALLOW_THREADS                                                                           \
    self->busy--;                                                                                  \
    if (st_) return raise_status(st_, fname, self->comm);                                          \
    Py_RETURN_NONE;                                                                                \
  } while (0)

static purlin_opts_t make_opts(int mode, int on_device) {
  purlin_opts_t o = PURLIN_OPTS_INIT;
  o.mode = (purlin_mode_t)mode;
  o.counts_on_device = on_device;
  return o;
}

/* all_reduce(send, recv, count, dtype, op, mode, stream) */
static PyObject *comm_all_reduce(CommObject *self, PyObject *args) {
  void *s, *r, *stream;
  unsigned long long n;
  int dt, op, mode;
  if (!PyArg_ParseTuple(args, "O&O&KiiiO&", conv_ptr, &s, conv_ptr, &r, &n, &dt, &op, &mode,
                        conv_ptr, &stream) ||
      !comm_ok(self))
    return NULL;
  purlin_opts_t o = make_opts(mode, 0);
  RUN_CALL(self, "purlin_all_reduce",
           purlin_all_reduce(s, r, (size_t)n, (purlin_dtype_t)dt, (purlin_op_t)op, self->comm,
                             stream, &o));
}

/* all_gather(send, recv, sendcount, dtype, stream) */
static PyObject *comm_all_gather(CommObject *self, PyObject *args) {
  void *s, *r, *stream;
  unsigned long long n;
  int dt;
  if (!PyArg_ParseTuple(args, "O&O&KiO&", conv_ptr, &s, conv_ptr, &r, &n, &dt, conv_ptr,
                        &stream) ||
      !comm_ok(self))
    return NULL;
  RUN_CALL(self, "purlin_all_gather",
           purlin_all_gather(s, r, (size_t)n, (purlin_dtype_t)dt, self->comm, stream, NULL));
}

/* reduce_scatter(send, recv, recvcount, dtype, op, mode, stream) */
static PyObject *comm_reduce_scatter(CommObject *self, PyObject *args) {
  void *s, *r, *stream;
  unsigned long long n;
  int dt, op, mode;
  if (!PyArg_ParseTuple(args, "O&O&KiiiO&", conv_ptr, &s, conv_ptr, &r, &n, &dt, &op, &mode,
                        conv_ptr, &stream) ||
      !comm_ok(self))
    return NULL;
  purlin_opts_t o = make_opts(mode, 0);
  RUN_CALL(self, "purlin_reduce_scatter",
           purlin_reduce_scatter(s, r, (size_t)n, (purlin_dtype_t)dt, (purlin_op_t)op, self->comm,
                                 stream, &o));
}

/* all_to_all(send, recv, count, dtype, stream) */
static PyObject *comm_all_to_all(CommObject *self, PyObject *args) {
  void *s, *r, *stream;
  unsigned long long n;
  int dt;
  if (!PyArg_ParseTuple(args, "O&O&KiO&", conv_ptr, &s, conv_ptr, &r, &n, &dt, conv_ptr,
                        &stream) ||
      !comm_ok(self))
    return NULL;
  RUN_CALL(self, "purlin_all_to_all",
           purlin_all_to_all(s, r, (size_t)n, (purlin_dtype_t)dt, self->comm, stream, NULL));
}

/* all_gather_v(send, sendcount, recv, recvcounts, dtype, stream, counts_on_device) */
static PyObject *comm_all_gather_v(CommObject *self, PyObject *args) {
  void *s, *r, *stream;
  unsigned long long n;
  int dt, dev;
  PyObject *rc;
  counts_t c;
  if (!PyArg_ParseTuple(args, "O&KO&OiO&p", conv_ptr, &s, &n, conv_ptr, &r, &rc, &dt, conv_ptr,
                        &stream, &dev) ||
      !comm_ok(self) || !get_counts(self, rc, dev, "recv_counts", &c))
    return NULL;
  purlin_opts_t o = make_opts(PURLIN_NONDETERMINISTIC, dev);
  RUN_CALL(self, "purlin_all_gather_v",
           purlin_all_gather_v(s, (size_t)n, r, c.ptr, NULL, (purlin_dtype_t)dt, self->comm,
                               stream, &o));
}

/* reduce_scatter_v(send, recv, recvcounts, dtype, op, mode, stream, counts_on_device) */
static PyObject *comm_reduce_scatter_v(CommObject *self, PyObject *args) {
  void *s, *r, *stream;
  int dt, op, mode, dev;
  PyObject *rc;
  counts_t c;
  if (!PyArg_ParseTuple(args, "O&O&OiiiO&p", conv_ptr, &s, conv_ptr, &r, &rc, &dt, &op, &mode,
                        conv_ptr, &stream, &dev) ||
      !comm_ok(self) || !get_counts(self, rc, dev, "counts", &c))
    return NULL;
  purlin_opts_t o = make_opts(mode, dev);
  RUN_CALL(self, "purlin_reduce_scatter_v",
           purlin_reduce_scatter_v(s, r, c.ptr, NULL, (purlin_dtype_t)dt, (purlin_op_t)op,
                                   self->comm, stream, &o));
}

/* all_to_all_v(send, sendcounts, recv, recvcounts, dtype, stream, counts_on_device) */
static PyObject *comm_all_to_all_v(CommObject *self, PyObject *args) {
  void *s, *r, *stream;
  int dt, dev;
  PyObject *sc, *rc;
  counts_t cs, cr;
  if (!PyArg_ParseTuple(args, "O&OO&OiO&p", conv_ptr, &s, &sc, conv_ptr, &r, &rc, &dt, conv_ptr,
                        &stream, &dev) ||
      !comm_ok(self) || !get_counts(self, sc, dev, "send_counts", &cs) ||
      !get_counts(self, rc, dev, "recv_counts", &cr))
    return NULL;
  purlin_opts_t o = make_opts(PURLIN_NONDETERMINISTIC, dev);
  RUN_CALL(self, "purlin_all_to_all_v",
           purlin_all_to_all_v(s, cs.ptr, NULL, r, cr.ptr, NULL, (purlin_dtype_t)dt, self->comm,
                               stream, &o));
}

static PyMethodDef comm_methods[] = {
    {"destroy", (PyCFunction)comm_destroy, METH_NOARGS, "purlin_comm_destroy (local)."},
    {"abort", (PyCFunction)comm_abort, METH_NOARGS, "purlin_comm_abort."},
    {"last_error", (PyCFunction)comm_last_error, METH_NOARGS, "purlin_comm_last_error text."},
    {"async_error", (PyCFunction)comm_async_error, METH_NOARGS,
     "The first asynchronous error's status name, or None."},
    {"mem_alloc", (PyCFunction)comm_mem_alloc, METH_O, "purlin_mem_alloc(bytes) -> address."},
    {"mem_free", (PyCFunction)comm_mem_free, METH_O, "purlin_mem_free(address)."},
    {"mem_register", (PyCFunction)comm_mem_register, METH_VARARGS,
     "purlin_mem_register(address, bytes)."},
    {"mem_deregister", (PyCFunction)comm_mem_deregister, METH_O,
     "purlin_mem_deregister(address)."},
    {"all_reduce", (PyCFunction)comm_all_reduce, METH_VARARGS, NULL},
    {"all_gather", (PyCFunction)comm_all_gather, METH_VARARGS, NULL},
    {"reduce_scatter", (PyCFunction)comm_reduce_scatter, METH_VARARGS, NULL},
    {"all_to_all", (PyCFunction)comm_all_to_all, METH_VARARGS, NULL},
    {"all_gather_v", (PyCFunction)comm_all_gather_v, METH_VARARGS, NULL},
    {"reduce_scatter_v", (PyCFunction)comm_reduce_scatter_v, METH_VARARGS, NULL},
    {"all_to_all_v", (PyCFunction)comm_all_to_all_v, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef comm_getset[] = {
    {"rank", (getter)comm_rank, NULL, "rank of this process", NULL},
    {"size", (getter)comm_size, NULL, "number of ranks", NULL},
    {"datapath", (getter)comm_datapath, NULL, "1: host, 2: CUDA", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject CommType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "purlin._C.Comm",
    .tp_basicsize = sizeof(CommObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A purlin communicator (use purlin.init / purlin.Communicator).",
    .tp_dealloc = (destructor)comm_dealloc,
    .tp_methods = comm_methods,
    .tp_getset = comm_getset,
};

/* ---- inspect(): array protocols ---------------------------------------------------------------- */

/* What inspect() found. */
typedef struct {
  void *ptr;
  int dtype; /* purlin_dtype_t */
  Py_ssize_t ndim;
  long long shape[64];
  long long count;
  int dev_type, dev_id; /* DLPack codes: 1 CPU, 2 CUDA, 3 CUDA host, 13 CUDA managed; id -1: ? */
  int readonly;
  PyObject *keep; /* a new reference that keeps the memory alive */
} view_t;

static const char *const SUPPORTED =
    "purlin's dtypes are float32 float16 bfloat16 float64 int8 uint8 int32 uint32 int64 uint64 "
    "float8_e4m3fn float8_e5m2";

/* A dtype by name (numpy dtype.name, torch without the prefix); -1 if unknown. */
static int dtype_from_name(const char *n) {
  static const struct {
    const char *name;
    int dt;
  } t[] = {{"float32", PURLIN_F32}, {"float16", PURLIN_F16}, {"bfloat16", PURLIN_BF16},
           {"float64", PURLIN_F64}, {"int8", PURLIN_I8},     {"uint8", PURLIN_U8},
           {"int32", PURLIN_I32},   {"uint32", PURLIN_U32},   {"int64", PURLIN_I64},
           {"uint64", PURLIN_U64},  {"float8_e4m3fn", PURLIN_FP8_E4M3},
           {"float8_e5m2", PURLIN_FP8_E5M2}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (strcmp(n, t[i].name) == 0) return t[i].dt;
  return -1;
}

/* The dtype of obj.dtype by its name (for numpy's extension dtypes), or -1. */
static int dtype_from_attr(PyObject *obj) {
  PyObject *d = PyObject_GetAttrString(obj, "dtype");
  if (!d) {
    PyErr_Clear();
    return -1;
  }
  PyObject *nm = PyObject_GetAttrString(d, "name");
  Py_DECREF(d);
  if (!nm || !PyUnicode_Check(nm)) {
    Py_XDECREF(nm);
    PyErr_Clear();
    return -1;
  }
  const char *s = PyUnicode_AsUTF8(nm);
  int dt = s ? dtype_from_name(s) : -1;
  Py_DECREF(nm);
  PyErr_Clear();
  return dt;
}

static PyObject *dtype_desc(PyObject *obj, const char *fallback) {
  PyObject *d = PyObject_GetAttrString(obj, "dtype");
  if (d) {
    PyObject *s = PyObject_Str(d);
    Py_DECREF(d);
    if (s) return s;
  }
  PyErr_Clear();
  return PyUnicode_FromString(fallback);
}

static int unsupported_dtype(const char *name, PyObject *obj, const char *fallback) {
  PyObject *desc = dtype_desc(obj, fallback);
  PyErr_Format(PyExc_TypeError, "%s has dtype %S, which purlin does not support (%s)", name,
               desc ? desc : Py_None, SUPPORTED);
  Py_XDECREF(desc);
  return -1;
}

/* numpy-style typestr ("<f4", "|u1", "<V2") -> dtype; -1 with an exception set. */
static int dtype_from_typestr(PyObject *obj, const char *ts, const char *name) {
  if (!ts || strlen(ts) < 3) return unsupported_dtype(name, obj, ts ? ts : "?");
  char order = ts[0], kind = ts[1];
  long size = strtol(ts + 2, NULL, 10);
  if (order == '>' && size > 1) {
    PyErr_Format(PyExc_TypeError,
                 "%s is big-endian (typestr '%s'); purlin needs native byte order (x.astype(x.dtype."
                 "newbyteorder('=')))",
                 name, ts);
    return -1;
  }
  if (kind == 'V' || (kind == 'f' && size == 1)) { /* ml_dtypes' bfloat16 and fp8 */
    int dt = dtype_from_attr(obj);
    if (dt >= 0 && (long)purlin_dtype_size((purlin_dtype_t)dt) == size) return dt;
    return unsupported_dtype(name, obj, ts);
  }
  int dt = -1;
  if (kind == 'f') dt = size == 2 ? PURLIN_F16 : size == 4 ? PURLIN_F32 : size == 8 ? PURLIN_F64 : -1;
  if (kind == 'i') dt = size == 1 ? PURLIN_I8 : size == 4 ? PURLIN_I32 : size == 8 ? PURLIN_I64 : -1;
  if (kind == 'u') dt = size == 1 ? PURLIN_U8 : size == 4 ? PURLIN_U32 : size == 8 ? PURLIN_U64 : -1;
  if (dt < 0) return unsupported_dtype(name, obj, ts);
  return dt;
}

/* struct-module format (buffer protocol) -> dtype; -1 with an exception set. */
static int dtype_from_format(PyObject *obj, const char *fmt, Py_ssize_t itemsize,
                             const char *name) {
  const char *f = fmt ? fmt : "B";
  if (*f == '@' || *f == '=' || *f == '<') f++;
  else if (*f == '>' || *f == '!') {
    if (itemsize > 1) {
      PyErr_Format(PyExc_TypeError, "%s is big-endian (format '%s'); purlin needs native order",
                   name, fmt);
      return -1;
    }
    f++;
  }
  if (strlen(f) != 1) return unsupported_dtype(name, obj, fmt);
  int dt = -1;
  switch (*f) {
  case 'f': dt = PURLIN_F32; break;
  case 'd': dt = PURLIN_F64; break;
  case 'e': dt = PURLIN_F16; break;
  case 'b': dt = PURLIN_I8; break;
  case 'B': dt = PURLIN_U8; break;
  case 'i': case 'l': case 'q': case 'n':
    dt = itemsize == 4 ? PURLIN_I32 : itemsize == 8 ? PURLIN_I64 : -1;
    break;
  case 'I': case 'L': case 'Q': case 'N':
    dt = itemsize == 4 ? PURLIN_U32 : itemsize == 8 ? PURLIN_U64 : -1;
    break;
  }
  if (dt < 0) return unsupported_dtype(name, obj, fmt);
  return dt;
}

/* Shape and element count; checks C-contiguity of strides given in bytes (NULL: contiguous). */
static int set_shape(view_t *v, const char *name, Py_ssize_t ndim, const long long *shape,
                     const long long *strides, long long esize) {
  if (ndim > 64) {
    PyErr_Format(PyExc_ValueError, "%s has %zd dimensions; purlin takes at most 64", name, ndim);
    return -1;
  }
  v->ndim = ndim;
  v->count = 1;
  for (Py_ssize_t i = 0; i < ndim; i++) {
    if (shape[i] < 0) {
      PyErr_Format(PyExc_ValueError, "%s has a negative extent in its shape", name);
      return -1;
    }
    v->shape[i] = shape[i];
    if (__builtin_mul_overflow(v->count, shape[i], &v->count)) {
      PyErr_Format(PyExc_ValueError, "%s: its element count overflows", name);
      return -1;
    }
  }
  if (!strides || v->count == 0) return 0;
  long long expect = esize;
  for (Py_ssize_t i = ndim - 1; i >= 0; i--) {
    if (shape[i] != 1 && strides[i] != expect) {
      PyObject *sh = PyList_New(0), *st = PyList_New(0);
      for (Py_ssize_t j = 0; sh && st && j < ndim; j++) {
        PyObject *a = PyLong_FromLongLong(shape[j]), *b = PyLong_FromLongLong(strides[j]);
        if (a) PyList_Append(sh, a);
        if (b) PyList_Append(st, b);
        Py_XDECREF(a);
        Py_XDECREF(b);
      }
      PyErr_Format(PyExc_ValueError,
                   "%s is not contiguous (shape %S, strides %S in bytes): purlin reads and writes "
                   "one dense block in C order; pass a contiguous copy "
                   "(numpy.ascontiguousarray(x), x.contiguous())",
                   name, sh ? sh : Py_None, st ? st : Py_None);
      Py_XDECREF(sh);
      Py_XDECREF(st);
      return -1;
    }
    expect *= shape[i];
  }
  return 0;
}

/* A tuple of ints into out[] (up to 64); returns the length or -1. */
static Py_ssize_t int_tuple(PyObject *t, long long *out, const char *name, const char *what) {
  if (!PyTuple_Check(t)) {
    PyErr_Format(PyExc_TypeError, "%s: %s is not a tuple", name, what);
    return -1;
  }
  Py_ssize_t n = PyTuple_GET_SIZE(t);
  if (n > 64) {
    PyErr_Format(PyExc_ValueError, "%s has %zd dimensions; purlin takes at most 64", name, n);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    out[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(t, i));
    if (out[i] == -1 && PyErr_Occurred()) return -1;
  }
  return n;
}

/* __array_interface__ / __cuda_array_interface__ (version 2/3 dicts). */
static int from_interface(PyObject *obj, PyObject *ai, const char *name, int cuda, view_t *v) {
  if (!PyDict_Check(ai)) {
    PyErr_Format(PyExc_TypeError, "%s: its array interface is not a dict", name);
    return -1;
  }
  PyObject *data = PyDict_GetItemString(ai, "data");
  PyObject *typestr = PyDict_GetItemString(ai, "typestr");
  PyObject *shape = PyDict_GetItemString(ai, "shape");
  PyObject *strides = PyDict_GetItemString(ai, "strides");
  if (!data || !PyTuple_Check(data) || PyTuple_GET_SIZE(data) != 2 || !typestr || !shape) {
    PyErr_Format(PyExc_TypeError,
                 "%s: its array interface has no (address, read-only) 'data' tuple", name);
    return -1;
  }
  v->ptr = PyLong_AsVoidPtr(PyTuple_GET_ITEM(data, 0));
  if (!v->ptr && PyErr_Occurred()) return -1;
  v->readonly = PyObject_IsTrue(PyTuple_GET_ITEM(data, 1));
  const char *ts = PyUnicode_Check(typestr) ? PyUnicode_AsUTF8(typestr) : NULL;
  if ((v->dtype = dtype_from_typestr(obj, ts, name)) < 0) return -1;
  long long sh[64], st[64];
  Py_ssize_t nd = int_tuple(shape, sh, name, "shape");
  if (nd < 0) return -1;
  if (strides && strides != Py_None) {
    if (int_tuple(strides, st, name, "strides") != nd) {
      if (!PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "%s: strides and shape differ in length", name);
      return -1;
    }
  }
  if (set_shape(v, name, nd, sh, strides && strides != Py_None ? st : NULL,
                (long long)purlin_dtype_size((purlin_dtype_t)v->dtype)))
    return -1;
  v->dev_type = cuda ? 2 : 1;
  v->dev_id = -1;
  Py_INCREF(obj);
  v->keep = obj;
  return 0;
}

/* DLPack, legacy (unversioned) capsules: the ABI is stable since DLPack 0.2. */
typedef struct {
  int32_t device_type, device_id;
} dl_device_t;
typedef struct {
  uint8_t code, bits;
  uint16_t lanes;
} dl_dtype_t;
typedef struct {
  void *data;
  dl_device_t device;
  int32_t ndim;
  dl_dtype_t dtype;
  int64_t *shape, *strides;
  uint64_t byte_offset;
} dl_tensor_t;
typedef struct dl_managed {
  dl_tensor_t t;
  void *manager_ctx;
  void (*deleter)(struct dl_managed *);
} dl_managed_t;

enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4, DL_F8_E4M3FN = 10, DL_F8_E5M2 = 12 };

static int dtype_from_dl(dl_dtype_t d) {
  if (d.lanes != 1) return -1;
  switch (d.code) {
  case DL_INT: return d.bits == 8 ? PURLIN_I8 : d.bits == 32 ? PURLIN_I32 : d.bits == 64 ? PURLIN_I64 : -1;
  case DL_UINT: return d.bits == 8 ? PURLIN_U8 : d.bits == 32 ? PURLIN_U32 : d.bits == 64 ? PURLIN_U64 : -1;
  case DL_FLOAT: return d.bits == 16 ? PURLIN_F16 : d.bits == 32 ? PURLIN_F32 : d.bits == 64 ? PURLIN_F64 : -1;
  case DL_BFLOAT: return d.bits == 16 ? PURLIN_BF16 : -1;
  case DL_F8_E4M3FN: return d.bits == 8 ? PURLIN_FP8_E4M3 : -1;
  case DL_F8_E5M2: return d.bits == 8 ? PURLIN_FP8_E5M2 : -1;
  }
  return -1;
}

/* Destructor of a capsule this module consumed: the consumer calls the producer's deleter. */
static void used_capsule_destructor(PyObject *cap) {
  dl_managed_t *m = PyCapsule_GetPointer(cap, "used_dltensor");
  if (m && m->deleter) m->deleter(m);
  PyErr_Clear();
}

static int from_dlpack(PyObject *obj, const char *name, PyObject *stream, view_t *v) {
  int dev_type = 1;
  PyObject *dev = PyObject_CallMethod(obj, "__dlpack_device__", NULL);
  if (dev) {
    if (PyTuple_Check(dev) && PyTuple_GET_SIZE(dev) == 2)
      dev_type = (int)PyLong_AsLong(PyTuple_GET_ITEM(dev, 0));
    Py_DECREF(dev);
    if (PyErr_Occurred()) return -1;
  } else {
    PyErr_Clear();
  }
  PyObject *cap;
  if (dev_type == 2 || dev_type == 13) {
    /* The consumer's stream: the producer orders its pending work before it. 0 is not a valid
     * value in the protocol; 1 is the legacy default stream. */
    PyObject *s = stream && stream != Py_None ? stream : NULL;
    PyObject *one = NULL;
    if (!s || (PyLong_Check(s) && PyLong_AsLongLong(s) == 0)) s = one = PyLong_FromLong(1);
    PyObject *kw = Py_BuildValue("{s:O}", "stream", s);
    PyObject *meth = PyObject_GetAttrString(obj, "__dlpack__");
    PyObject *noargs = PyTuple_New(0);
    cap = meth && kw && noargs ? PyObject_Call(meth, noargs, kw) : NULL;
    Py_XDECREF(meth);
    Py_XDECREF(kw);
    Py_XDECREF(noargs);
    Py_XDECREF(one);
  } else {
    cap = PyObject_CallMethod(obj, "__dlpack__", NULL);
  }
  if (!cap) {
    PyObject *t, *val, *tb;
    PyErr_Fetch(&t, &val, &tb);
    PyErr_Format(PyExc_TypeError, "%s: its __dlpack__() failed: %S", name, val ? val : Py_None);
    Py_XDECREF(t);
    Py_XDECREF(val);
    Py_XDECREF(tb);
    return -1;
  }
  dl_managed_t *m = PyCapsule_IsValid(cap, "dltensor") ? PyCapsule_GetPointer(cap, "dltensor") : NULL;
  if (!m) {
    Py_DECREF(cap);
    PyErr_Format(PyExc_TypeError, "%s: __dlpack__() did not return a 'dltensor' capsule", name);
    return -1;
  }
  /* Take ownership: from now on this capsule's destructor calls the deleter. */
  PyCapsule_SetName(cap, "used_dltensor");
  PyCapsule_SetDestructor(cap, used_capsule_destructor);
  v->keep = cap;
  dl_tensor_t *t = &m->t;
  v->dtype = dtype_from_dl(t->dtype);
  if (v->dtype < 0) {
    char desc[64];
    snprintf(desc, sizeof desc, "DLPack code %u bits %u lanes %u", t->dtype.code, t->dtype.bits,
             t->dtype.lanes);
    return unsupported_dtype(name, obj, desc);
  }
  long long sh[64], st[64];
  if (t->ndim < 0 || t->ndim > 64) {
    PyErr_Format(PyExc_ValueError, "%s has %d dimensions; purlin takes at most 64", name,
                 (int)t->ndim);
    return -1;
  }
  long long es = (long long)purlin_dtype_size((purlin_dtype_t)v->dtype);
  for (int i = 0; i < t->ndim; i++) {
    sh[i] = t->shape[i];
    if (t->strides) st[i] = t->strides[i] * es;
  }
  if (set_shape(v, name, t->ndim, sh, t->strides ? st : NULL, es)) return -1;
  v->ptr = (char *)t->data + t->byte_offset;
  v->dev_type = t->device.device_type;
  v->dev_id = t->device.device_id;
  v->readonly = 0;
  return 0;
}

static int from_buffer(PyObject *obj, const char *name, view_t *v) {
  PyObject *mv = PyMemoryView_FromObject(obj);
  if (!mv) return -1;
  v->keep = mv;
  Py_buffer *b = PyMemoryView_GET_BUFFER(mv);
  if ((v->dtype = dtype_from_format(obj, b->format, b->itemsize, name)) < 0) return -1;
  if (!PyBuffer_IsContiguous(b, 'C')) {
    PyErr_Format(PyExc_ValueError,
                 "%s is not contiguous: purlin reads and writes one dense block in C order; pass "
                 "a contiguous copy",
                 name);
    return -1;
  }
  long long sh[64];
  int nd = b->ndim;
  if (nd > 64) nd = 64;
  for (int i = 0; i < nd; i++) sh[i] = b->shape ? b->shape[i] : b->len / b->itemsize;
  if (set_shape(v, name, nd, sh, NULL, b->itemsize)) return -1;
  v->ptr = b->buf;
  v->readonly = b->readonly;
  v->dev_type = 1;
  v->dev_id = -1;
  return 0;
}

static int has_attr(PyObject *o, const char *a) {
  int r = PyObject_HasAttrString(o, a);
  PyErr_Clear();
  return r;
}

/*
 * inspect(obj, name, stream=None) -> (address, dtype, count, shape, dev_type, dev_id, readonly,
 * keepalive). `name` names the argument in error messages; `stream` is the CUDA stream the call
 * will run on (given to __dlpack__ for device arrays). keepalive must be kept until the call is done.
 */
static PyObject *py_inspect(PyObject *mod, PyObject *args) {
  PyObject *obj, *stream = Py_None;
  const char *name;
  if (!PyArg_ParseTuple(args, "Os|O", &obj, &name, &stream)) return NULL;
  view_t v;
  memset(&v, 0, sizeof v);
  int rc;
  PyObject *ai;
  if (has_attr(obj, "__array_interface__") &&
      (ai = PyObject_GetAttrString(obj, "__array_interface__"))) {
    rc = from_interface(obj, ai, name, 0, &v);
    Py_DECREF(ai);
  } else if (has_attr(obj, "__dlpack__")) {
    rc = from_dlpack(obj, name, stream, &v);
  } else if (has_attr(obj, "__cuda_array_interface__") &&
             (ai = PyObject_GetAttrString(obj, "__cuda_array_interface__"))) {
    rc = from_interface(obj, ai, name, 1, &v);
    Py_DECREF(ai);
  } else if (PyObject_CheckBuffer(obj)) {
    rc = from_buffer(obj, name, &v);
  } else {
    PyErr_Format(PyExc_TypeError,
                 "%s is a %s; purlin takes numpy arrays, torch tensors, and objects with "
                 "__dlpack__, __cuda_array_interface__ or the buffer protocol",
                 name, Py_TYPE(obj)->tp_name);
    return NULL;
  }
  if (rc) {
    Py_XDECREF(v.keep);
    return NULL;
  }
  PyObject *shape = PyTuple_New(v.ndim);
  if (!shape) {
    Py_XDECREF(v.keep);
    return NULL;
  }
  for (Py_ssize_t i = 0; i < v.ndim; i++)
    PyTuple_SET_ITEM(shape, i, PyLong_FromLongLong(v.shape[i]));
  PyObject *res = Py_BuildValue("(NiLNiiNN)", PyLong_FromVoidPtr(v.ptr), v.dtype, v.count, shape,
                                v.dev_type, v.dev_id, PyBool_FromLong(v.readonly), v.keep);
  return res;
}

/* host_buffer(address, nbytes) -> a writable memoryview over memory this module does not own
 * (purlin_mem_alloc on the host datapath). */
static PyObject *py_host_buffer(PyObject *mod, PyObject *args) {
  void *p;
  Py_ssize_t n;
  if (!PyArg_ParseTuple(args, "O&n", conv_ptr, &p, &n)) return NULL;
  return PyMemoryView_FromMemory((char *)p, n, PyBUF_WRITE);
}

/* A DLPack capsule for `nbytes` of uint8 at `address` on (dev_type, dev_id), owned elsewhere (the
 * communicator): the deleter frees only the descriptor. For torch.utils.dlpack.from_dlpack. */
typedef struct {
  dl_managed_t m;
  int64_t shape[1];
} own_dl_t;

static void own_dl_deleter(dl_managed_t *m) { PyMem_RawFree(m); }

static void fresh_capsule_destructor(PyObject *cap) {
  if (PyCapsule_IsValid(cap, "dltensor")) { /* never consumed */
    dl_managed_t *m = PyCapsule_GetPointer(cap, "dltensor");
    if (m && m->deleter) m->deleter(m);
  }
  PyErr_Clear();
}

static PyObject *py_dlpack_capsule(PyObject *mod, PyObject *args) {
  void *p;
  long long n;
  int dev_type, dev_id;
  if (!PyArg_ParseTuple(args, "O&Lii", conv_ptr, &p, &n, &dev_type, &dev_id)) return NULL;
  own_dl_t *o = PyMem_RawCalloc(1, sizeof *o);
  if (!o) return PyErr_NoMemory();
  o->shape[0] = n;
  o->m.t.data = p;
  o->m.t.device.device_type = dev_type;
  o->m.t.device.device_id = dev_id;
  o->m.t.ndim = 1;
  o->m.t.dtype.code = DL_UINT;
  o->m.t.dtype.bits = 8;
  o->m.t.dtype.lanes = 1;
  o->m.t.shape = o->shape;
  o->m.t.strides = NULL;
  o->m.deleter = own_dl_deleter;
  PyObject *cap = PyCapsule_New(&o->m, "dltensor", fresh_capsule_destructor);
  if (!cap) PyMem_RawFree(o);
  return cap;
}

static PyObject *py_status_name(PyObject *mod, PyObject *arg) {
  long v = PyLong_AsLong(arg);
  if (v == -1 && PyErr_Occurred()) return NULL;
  return PyUnicode_FromString(purlin_status_name((purlin_status_t)v));
}

static PyMethodDef module_methods[] = {
    {"comm_init_env", (PyCFunction)(void (*)(void))py_comm_init_env, METH_VARARGS | METH_KEYWORDS,
     "purlin_comm_init_env(datapath, device, timeout_ms, staging_bytes, name) -> Comm"},
    {"comm_init_rank", (PyCFunction)(void (*)(void))py_comm_init_rank,
     METH_VARARGS | METH_KEYWORDS,
     "purlin_comm_init_rank(nranks, unique_id, rank, datapath, device, ...) -> Comm"},
    {"get_unique_id", py_get_unique_id, METH_NOARGS, "purlin_get_unique_id() -> 128 bytes"},
    {"inspect", py_inspect, METH_VARARGS, "inspect(obj, name, stream=None) -> view tuple"},
    {"host_buffer", py_host_buffer, METH_VARARGS, "host_buffer(address, nbytes) -> memoryview"},
    {"dlpack_capsule", py_dlpack_capsule, METH_VARARGS,
     "dlpack_capsule(address, nbytes, dev_type, dev_id) -> DLPack capsule (uint8)"},
    {"status_name", py_status_name, METH_O, "purlin_status_name(code)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "purlin._C",
                                        "purlin's C extension (see purlin/__init__.py).", -1,
                                        module_methods};

PyMODINIT_FUNC PyInit__C(void) {
  if (PyType_Ready(&CommType) < 0) return NULL;
  PyObject *m = PyModule_Create(&module_def);
  if (!m) return NULL;
  PurlinError = PyErr_NewExceptionWithDoc(
      "purlin.PurlinError",
      "An error returned by the purlin C library. Attributes: status (the status name, e.g. "
      "'PURLIN_ERR_MISMATCH'), code (its number) and text (the communicator's last-error text: "
      "what, which rank, which call, which argument).",
      PyExc_RuntimeError, NULL);
  if (!PurlinError) goto fail;
  Py_INCREF(PurlinError);
  if (PyModule_AddObject(m, "PurlinError", PurlinError) < 0) goto fail;
  Py_INCREF(&CommType);
  if (PyModule_AddObject(m, "Comm", (PyObject *)&CommType) < 0) goto fail;
  int version = 0;
  purlin_get_version(&version);
  if (PyModule_AddIntConstant(m, "VERSION", version) < 0) goto fail;
#define ADD_DT(NAME, suffix, bytes)                                                                \
  if (PyModule_AddIntConstant(m, "DT_" #NAME, PURLIN_##NAME) < 0) goto fail;
  PURLIN_DTYPE_MAP(ADD_DT)
#undef ADD_DT
  if (PyModule_AddIntConstant(m, "DATAPATH_AUTO", PURLIN_DATAPATH_AUTO) < 0 ||
      PyModule_AddIntConstant(m, "DATAPATH_HOST", PURLIN_DATAPATH_HOST) < 0 ||
      PyModule_AddIntConstant(m, "DATAPATH_CUDA", PURLIN_DATAPATH_CUDA) < 0)
    goto fail;
  return m;
fail:
  Py_DECREF(m);
  return NULL;
}
