/* The native warm launch of a CPU-backend specialization (see native_launch.py).
 *
 * One object per specialization, built from the same facts the generated Python warm
 * launch (fastpath.py) is written from, doing the same work in the same order:
 * env guard, constexpr guards, per-argument guards and packing (torch CPU tensors,
 * ints, floats, bools; defaults prepacked), the overlap guards, then the kernel's
 * packed entry called directly for a one-block grid without dynamic shared memory
 * (any other launch copies the packed values into the thread's slot table and calls
 * the Python submit, as the Python warm launch does). A guard that fails returns
 * False; the caller then takes the keyed lookup and the cold path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <float.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum { K_TORCH = 1, K_INT = 2, K_F32 = 3, K_F64 = 4, K_BOOL = 5, K_NUMPY = 6 };

#define MAX_RANK 16
#define MAX_SLOTS 512    /* on the stack: 8 KiB with the table */

typedef struct {
    int kind, pos, off, nd, item, dtype_code;
    int inner, aligned, wide, written, ranged;
    PyObject *type, *dtype;             /* borrowed from the owner's `keep` list */
    long long lo, hi;                   /* ints: lo <= v <= hi */
    int divisible, not_int32;           /* ints: v % 16 == 0 iff divisible; refuse int32 values */
} Arg;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vcall;
    PyObject *dict;
    PyObject *keep;                     /* list: every object the Arg/const fields borrow */
    Py_ssize_t nargs;
    int narg; Arg *argv;
    int nconst; Py_ssize_t *cpos; PyObject **ctype, **cval;
    PyObject *env_dict; int nenv; PyObject **env_key, **env_val;   /* env_val NULL: unset */
    int npairs; int *pairs;             /* (i, j, overlapping) per pair */
    int nvals, dims_at;                 /* argument slots; where the launch dims go */
    int64_t *tmpl;                      /* defaults prepacked; offsets 0 */
    PyObject *library, *fn, *refresh;   /* library.call is fn: entry is current */
    void *entry;
    PyObject *local, *new_buffer, *submit, *interrupted, *name, *torch_writable;
} Fast;

/* torch's stable C ABI (the AOTInductor shim of libtorch_cpu), set by torch_shim():
 * a tensor's facts read without the interpreter. A handle is an at::Tensor*, and an
 * at::Tensor is its TensorImpl pointer (what Tensor._cdata gives). */
typedef void *Handle;
typedef int32_t (*ShimPtr)(Handle, void **);
typedef int32_t (*ShimInts)(Handle, int64_t **);
typedef int32_t (*ShimInt)(Handle, int64_t *);
typedef int32_t (*ShimCode)(Handle, int32_t *);
static ShimPtr sh_data_ptr;
static ShimInts sh_sizes, sh_strides;
static ShimInt sh_dim;
static ShimCode sh_dtype, sh_device_type, sh_layout;
static int32_t sh_cpu, sh_strided;
/* at::native::is_neg(const at::Tensor &) (libtorch's C++ ABI: a handle is an at::Tensor
 * pointer), set by torch_is_neg() once checked against torch's Python API; NULL: ask
 * the tensor's is_neg() method (about 0.1 us). */
typedef bool (*ShimFlag)(Handle);
static ShimFlag sh_is_neg;
static int shim_ready;

static PyObject *s_cdata, *s_dtype, *s_is_cpu, *s_is_inference, *s_is_neg, *s_stride, *s_shape,
    *s_data_ptr, *s_buf, *s_values, *s_call;

/* Reads a tuple of ints (torch.Size is one) into out; -1 on error, else its length. */
static int read_ints(PyObject *t, long long *out, int max) {
    if (!PyTuple_Check(t)) { PyErr_SetString(PyExc_TypeError, "expected a tuple"); return -1; }
    Py_ssize_t n = PyTuple_GET_SIZE(t);
    if (n > max) return max + 1;
    for (Py_ssize_t k = 0; k < n; k++) {
        out[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(t, k));
        if (out[k] == -1 && PyErr_Occurred()) return -1;
    }
    return (int)n;
}

/* 1: the negative bit is set (z.conj().imag: the memory holds the values without
 * their sign, which the cold path refuses), 0: not, -1: error. The shim has no
 * reader for it; one method call. The conjugate bit needs a complex dtype, which
 * the dtype guard refuses. */
static int negative(PyObject *a) {
    PyObject *x = PyObject_CallMethodNoArgs(a, s_is_neg);
    if (!x) return -1;
    int neg = PyObject_IsTrue(x);
    Py_DECREF(x);
    return neg;
}

static int writable(Fast *f, PyObject *a) {
    PyObject *x = PyObject_CallMethodNoArgs(a, s_is_inference);
    if (!x) return -1;
    int inference = PyObject_IsTrue(x);
    Py_DECREF(x);
    if (inference <= 0) return inference < 0 ? -1 : 1;
    x = PyObject_CallOneArg(f->torch_writable, a);
    if (!x) return -1;
    int ok = PyObject_IsTrue(x);
    Py_DECREF(x);
    return ok;
}

/* Whether the innermost contiguity is what the key said (checked before the data
 * pointer is read, as the Python warm launch does). */
static int inner_ok(Arg *g, int nd, const long long *sh, const long long *st) {
    return !nd || (st[nd - 1] == 1 || sh[nd - 1] == 1) == g->inner;
}

/* The tail of both tensor paths: the guards on the pointer and the size, then the
 * packing. */
static int tensor_tail(Arg *g, int nd, const long long *sh, const long long *st,
                       unsigned long long p, int64_t *v, long long *lo, long long *hi) {
    /* unsigned: as_strided strides may overflow the products (wrapping keeps the
     * residue mod 16; a numel that overflows has a zero size, and is 0 either way) */
    int misaligned = (p % 16) != 0;
    for (int k = 0; k < nd - 1; k++)
        misaligned |= (((unsigned long long)st[k] * (unsigned long long)g->item) % 16) != 0;
    if (misaligned == g->aligned) return 0;
    unsigned long long numel = 1;
    for (int k = 0; k < nd; k++) numel *= (unsigned long long)sh[k];
    if (nd && (numel >= 2147483648ULL) != g->wide) return 0;
    if (!p && numel) return 0;   /* no memory (a FakeTensor...): the cold path refuses it */
    int64_t *s = v + g->off;
    s[0] = (int64_t)p; s[1] = (int64_t)p;
    for (int k = 0; k < nd; k++) { s[3 + k] = sh[k]; s[3 + nd + k] = st[k]; }
    if (g->ranged) { *lo = (long long)p; *hi = (long long)p + sh[0] * g->item; }
    return 1;
}

/* Through the shim: 1/0/-1 as torch_arg, 2 where the shim cannot answer (a tensor
 * that is not strided, or an error: the Python path then says what torch says). */
static int torch_arg_shim(Fast *f, Arg *g, PyObject *a, int64_t *v, long long *lo,
                          long long *hi) {
    PyObject *x = PyObject_GetAttr(a, s_cdata);
    if (!x) return -1;
    void *impl = PyLong_AsVoidPtr(x);
    Py_DECREF(x);
    if (!impl) return PyErr_Occurred() ? -1 : 2;
    Handle h = (Handle)&impl;
    int32_t code;
    if (sh_layout(h, &code) || code != sh_strided) return 2;
    if (sh_dtype(h, &code)) return 2;
    if (code != g->dtype_code) return 0;
    if (sh_device_type(h, &code)) return 2;
    if (code != sh_cpu) return 0;
    int neg = sh_is_neg ? (int)sh_is_neg(h) : negative(a);
    if (neg) return neg < 0 ? -1 : 0;
    if (g->written) {
        int ok = writable(f, a);
        if (ok <= 0) return ok;
    }
    int64_t dim, *sizes, *strides;
    void *data;
    if (sh_dim(h, &dim)) return 2;
    if (dim != g->nd) return 0;
    if (sh_sizes(h, &sizes) || sh_strides(h, &strides)) return 2;
    if (!inner_ok(g, (int)dim, (const long long *)sizes, (const long long *)strides)) return 0;
    if (sh_data_ptr(h, &data)) return 2;
    return tensor_tail(g, (int)dim, (const long long *)sizes, (const long long *)strides,
                       (unsigned long long)(uintptr_t)data, v, lo, hi);
}

/* numpy's C ABI (PyArrayObject_fields, what PyArray_DATA and friends read), set by
 * numpy_layout() once checked against numpy's Python API on sample arrays. */
static Py_ssize_t np_data, np_nd, np_dims, np_strides, np_descr, np_flags;
static int numpy_ready;
#define NPY_WRITEABLE 0x0400
#define FIELD(a, off, T) (*(T *)((char *)(a) + (off)))

/* A numpy array, as the Python warm launch guards and packs it (1/0/-1). */
static int numpy_arg(Arg *g, PyObject *a, int64_t *v, long long *lo, long long *hi) {
    if ((PyObject *)Py_TYPE(a) != g->type) return 0;
    if (g->written && !(FIELD(a, np_flags, int) & NPY_WRITEABLE)) return 0;
    PyObject *descr = FIELD(a, np_descr, PyObject *);
    if (descr != g->dtype) {
        int eq = PyObject_RichCompareBool(descr, g->dtype, Py_EQ);
        if (eq <= 0) return eq;
    }
    int nd = FIELD(a, np_nd, int);
    if (nd != g->nd) return 0;
    const Py_ssize_t *sd = FIELD(a, np_strides, Py_ssize_t *);
    const Py_ssize_t *sh = FIELD(a, np_dims, Py_ssize_t *);
    if (g->item != 1)
        for (int k = 0; k < nd; k++)
            if (sd[k] % g->item) return 0;
    if (nd && ((sd[nd - 1] == g->item || sh[nd - 1] == 1) != g->inner)) return 0;
    unsigned long long p = (unsigned long long)(uintptr_t)FIELD(a, np_data, char *);
    int misaligned = (p % 16) != 0;
    for (int k = 0; k < nd - 1; k++)
        misaligned |= (sd[k] % 16) != 0;
    if (misaligned == g->aligned) return 0;
    unsigned long long numel = 1;
    for (int k = 0; k < nd; k++) numel *= (unsigned long long)sh[k];
    if ((numel >= 2147483648ULL) != g->wide) return 0;
    int64_t *s = v + g->off;
    s[0] = (int64_t)p; s[1] = (int64_t)p;
    for (int k = 0; k < nd; k++) { s[3 + k] = sh[k]; s[3 + nd + k] = sd[k] / g->item; }
    if (g->ranged) { *lo = (long long)p; *hi = (long long)p + sh[0] * g->item; }
    return 1;
}

/* 1: the torch tensor passes its guards (and is packed), 0: it does not, -1: error. */
static int torch_arg(Fast *f, Arg *g, PyObject *a, int64_t *v, long long *lo, long long *hi) {
    if ((PyObject *)Py_TYPE(a) != g->type) return 0;
    if (shim_ready && g->dtype_code >= 0) {
        int r = torch_arg_shim(f, g, a, v, lo, hi);
        if (r != 2) return r;
    }
    PyObject *x = PyObject_GetAttr(a, s_dtype);
    if (!x) return -1;
    int same = x == g->dtype;
    Py_DECREF(x);
    if (!same) return 0;
    x = PyObject_GetAttr(a, s_is_cpu);
    if (!x) return -1;
    same = x == Py_True;
    Py_DECREF(x);
    if (!same) return 0;
    int neg = negative(a);
    if (neg) return neg < 0 ? -1 : 0;
    if (g->written) {
        int ok = writable(f, a);
        if (ok <= 0) return ok;
    }
    long long st[MAX_RANK], sh[MAX_RANK];
    x = PyObject_CallMethodNoArgs(a, s_stride);
    if (!x) return -1;
    int nd = read_ints(x, st, MAX_RANK);
    Py_DECREF(x);
    if (nd < 0) return -1;
    if (nd != g->nd) return 0;
    if (nd) {
        x = PyObject_GetAttr(a, s_shape);
        if (!x) return -1;
        int n2 = read_ints(x, sh, MAX_RANK);
        Py_DECREF(x);
        if (n2 < 0) return -1;
        if (n2 != nd) return 0;
        if (!inner_ok(g, nd, sh, st)) return 0;
    }
    x = PyObject_CallMethodNoArgs(a, s_data_ptr);
    if (!x) return -1;
    unsigned long long p = PyLong_AsUnsignedLongLong(x);
    Py_DECREF(x);
    if (p == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    return tensor_tail(g, nd, sh, st, p, v, lo, hi);
}

static int scalar_arg(Arg *g, PyObject *a, int64_t *v) {
    if ((PyObject *)Py_TYPE(a) != g->type) return 0;
    if (g->kind == K_INT) {
        int over = 0;
        long long x = PyLong_AsLongLongAndOverflow(a, &over);
        if (x == -1 && PyErr_Occurred()) return -1;
        if (over || x < g->lo || x > g->hi) return 0;
        if ((x % 16 == 0) != g->divisible) return 0;
        if (g->not_int32 && x >= -2147483648LL && x < 2147483648LL) return 0;
        v[g->off] = x;
        return 1;
    }
    if (g->kind == K_BOOL) { v[g->off] = a == Py_True; return 1; }
    double d = PyFloat_AS_DOUBLE(a);
    if (g->kind == K_F64) { memcpy(&v[g->off], &d, 8); return 1; }
    float y = (float)d;
    if (isinf(y) && !isinf(d)) {   /* what struct.pack("<f") refuses */
        PyErr_SetString(PyExc_OverflowError, "float too large to pack with f format");
        return -1;
    }
    uint32_t bits;
    memcpy(&bits, &y, 4);
    v[g->off] = bits;
    return 1;
}

/* The entry point, current: refreshed through Python when the library's `call` is no
 * longer the function object held (a sweep put its probe back, or it was unloaded). */
static int current_entry(Fast *f) {
    PyObject *call = PyObject_GetAttr(f->library, s_call);
    if (!call) return -1;
    int same = call == f->fn;
    Py_DECREF(call);
    if (same) return 0;
    PyObject *r = PyObject_CallOneArg(f->refresh, f->library);
    if (!r) return -1;
    if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 2) {
        Py_DECREF(r);
        PyErr_SetString(PyExc_TypeError, "refresh must return (fn, address)");
        return -1;
    }
    void *entry = PyLong_AsVoidPtr(PyTuple_GET_ITEM(r, 1));
    if (!entry && PyErr_Occurred()) { Py_DECREF(r); return -1; }
    PyObject *old = f->fn;
    f->fn = Py_NewRef(PyTuple_GET_ITEM(r, 0));
    f->entry = entry;
    Py_XDECREF(old);
    Py_DECREF(r);
    return 0;
}

static PyObject *submit_slow(Fast *f, int64_t *v, PyObject *grid, PyObject *block,
                             PyObject *smem, PyObject *stream) {
    PyObject *buf = PyObject_GetAttr(f->local, s_buf);
    if (!buf) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
        PyErr_Clear();
        buf = PyObject_CallNoArgs(f->new_buffer);
        if (!buf) return NULL;
    }
    PyObject *values = PyObject_GetAttr(buf, s_values);
    if (!values) { Py_DECREF(buf); return NULL; }
    Py_buffer view;
    if (PyObject_GetBuffer(values, &view, PyBUF_WRITABLE) < 0) {
        Py_DECREF(values); Py_DECREF(buf); return NULL;
    }
    if (view.len >= (Py_ssize_t)(8 * f->nvals)) memcpy(view.buf, v, 8 * (size_t)f->nvals);
    Py_ssize_t len = view.len;
    PyBuffer_Release(&view);
    Py_DECREF(values);
    if (len < (Py_ssize_t)(8 * f->nvals)) {
        Py_DECREF(buf);
        PyErr_SetString(PyExc_RuntimeError, "slot table smaller than the launch's arguments");
        return NULL;
    }
    PyObject *r = PyObject_CallFunctionObjArgs(f->submit, buf, grid, block, smem, stream, NULL);
    Py_DECREF(buf);
    if (!r) return NULL;
    Py_DECREF(r);
    Py_RETURN_TRUE;
}

static PyObject *Fast_vcall(PyObject *self, PyObject *const *argv, size_t nargsf, PyObject *kw) {
    Fast *f = (Fast *)self;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kw || n != 5) {
        PyErr_SetString(PyExc_TypeError, "fast(args, grid, block, smem, stream)");
        return NULL;
    }
    PyObject *args = argv[0], *grid = argv[1], *block = argv[2], *smem = argv[3],
             *stream = argv[4];
    if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != f->nargs) Py_RETURN_FALSE;
    for (int k = 0; k < f->nenv; k++) {
        PyObject *have = PyDict_GetItemWithError(f->env_dict, f->env_key[k]);
        if (!have && PyErr_Occurred()) return NULL;
        PyObject *want = f->env_val[k];
        if (!have || !want) {
            if (have != want) Py_RETURN_FALSE;
            continue;
        }
        if (have != want) {
            int eq = PyObject_RichCompareBool(have, want, Py_EQ);
            if (eq < 0) return NULL;
            if (!eq) Py_RETURN_FALSE;
        }
    }
    for (int k = 0; k < f->nconst; k++) {
        PyObject *a = PyTuple_GET_ITEM(args, f->cpos[k]);
        if ((PyObject *)Py_TYPE(a) != f->ctype[k]) Py_RETURN_FALSE;
        int ne = PyObject_RichCompareBool(a, f->cval[k], Py_NE);
        if (ne < 0) return NULL;
        if (ne) Py_RETURN_FALSE;
    }
    int64_t v[MAX_SLOTS];
    void *table[MAX_SLOTS];
    long long lo[64], hi[64];
    memcpy(v, f->tmpl, 8 * (size_t)f->nvals);
    for (int i = 0; i < f->narg; i++) {
        Arg *g = &f->argv[i];
        if (!g->kind) continue;   /* a default: prepacked */
        PyObject *a = PyTuple_GET_ITEM(args, g->pos);
        int ok = g->kind == K_TORCH ? torch_arg(f, g, a, v, &lo[i], &hi[i])
                 : g->kind == K_NUMPY ? numpy_arg(g, a, v, &lo[i], &hi[i])
                 : scalar_arg(g, a, v);
        if (ok < 0) return NULL;
        if (!ok) Py_RETURN_FALSE;
    }
    for (int k = 0; k < f->npairs; k++) {
        int i = f->pairs[3 * k], j = f->pairs[3 * k + 1], overlapping = f->pairs[3 * k + 2];
        int meet = lo[i] < hi[j] && lo[j] < hi[i];
        if (meet != overlapping) Py_RETURN_FALSE;
    }
    long long dims[6];
    if (!PyTuple_Check(grid) || !PyTuple_Check(block) || read_ints(grid, dims, 3) != 3 ||
        read_ints(block, dims + 3, 3) != 3) {
        if (PyErr_Occurred()) return NULL;
        return submit_slow(f, v, grid, block, smem, stream);
    }
    long long nblocks = dims[0] * dims[1] * dims[2];
    int over = 0;
    if (nblocks != 1 || !PyLong_CheckExact(smem) ||
        PyLong_AsLongLongAndOverflow(smem, &over) != 0 || over)   /* over: sets no error */
        return submit_slow(f, v, grid, block, smem, stream);
    if (current_entry(f) < 0) return NULL;
    int d = f->dims_at;
    for (int k = 0; k < 6; k++) v[d + k] = dims[k];
    v[d + 6] = 0; v[d + 7] = 1; v[d + 8] = 0;
    for (int k = 0; k < d + 9; k++) table[k] = &v[k];
    int32_t (*entry)(void **) = (int32_t (*)(void **))f->entry;
    PyObject *held = Py_NewRef(f->fn);   /* keeps the library mapped while it runs */
    int32_t stopped;
    Py_BEGIN_ALLOW_THREADS
    stopped = entry(table);
    Py_END_ALLOW_THREADS
    Py_DECREF(held);
    if (stopped) {
        PyObject *e = PyObject_CallOneArg(f->interrupted, f->name);
        if (e) { PyErr_SetObject((PyObject *)Py_TYPE(e), e); Py_DECREF(e); }
        return NULL;
    }
    Py_RETURN_TRUE;
}

static void Fast_dealloc(PyObject *self) {
    Fast *f = (Fast *)self;
    PyObject_GC_UnTrack(self);
    Py_CLEAR(f->dict);
    Py_CLEAR(f->keep);
    Py_CLEAR(f->fn);
    PyMem_Free(f->argv); PyMem_Free(f->cpos); PyMem_Free(f->ctype); PyMem_Free(f->cval);
    PyMem_Free(f->env_key); PyMem_Free(f->env_val); PyMem_Free(f->pairs); PyMem_Free(f->tmpl);
    Py_TYPE(self)->tp_free(self);
}

static int Fast_traverse(PyObject *self, visitproc visit, void *arg) {
    Fast *f = (Fast *)self;
    Py_VISIT(f->dict);
    Py_VISIT(f->keep);
    Py_VISIT(f->fn);
    return 0;
}

static int Fast_clear(PyObject *self) {
    Fast *f = (Fast *)self;
    Py_CLEAR(f->dict);
    Py_CLEAR(f->keep);
    Py_CLEAR(f->fn);
    return 0;
}

static PyObject *Fast_call(PyObject *self, PyObject *args, PyObject *kw) {
    return PyVectorcall_Call(self, args, kw);
}

static PyTypeObject FastType;

/* Borrow an object kept alive by f->keep. */
static PyObject *kept(Fast *f, PyObject *o) {
    if (PyList_Append(f->keep, o) < 0) return NULL;
    return o;
}

#define GET(t, i) PyTuple_GET_ITEM(t, i)
#define AS_INT(o) ((int)PyLong_AsLong(o))

/* new(nargs, env_dict, env_keys, env_values, constexprs, args, pairs, nvals, dims_at,
 *     template_bytes, library, fn, entry, refresh, local, new_buffer, submit,
 *     interrupted, name, torch_writable)
 * constexprs: ((pos, type, value), ...); args: one tuple per runtime parameter:
 * (kind, pos, off, nd, item, inner, aligned, wide, written, ranged, type, dtype, lo, max,
 *  divisible, not_int32, torch dtype code or -1), kind 0 for a default. pairs: ((i, j, overlapping), ...). */
static PyObject *native_new(PyObject *mod, PyObject *a) {
    PyObject *env_dict, *env_keys, *env_vals, *consts, *args, *pairs, *tmpl, *library, *fn,
        *entry, *refresh, *local, *new_buffer, *submit, *interrupted, *name, *tw;
    Py_ssize_t nargs;
    int nvals, dims_at;
    if (!PyArg_ParseTuple(a, "nOO!O!O!O!O!iiSOOOOOOOOOO", &nargs, &env_dict, &PyTuple_Type,
                          &env_keys, &PyTuple_Type, &env_vals, &PyTuple_Type, &consts,
                          &PyTuple_Type, &args, &PyTuple_Type, &pairs, &nvals, &dims_at, &tmpl,
                          &library, &fn, &entry, &refresh, &local, &new_buffer, &submit,
                          &interrupted, &name, &tw))
        return NULL;
    if (dims_at + 9 > MAX_SLOTS || nvals != dims_at || PyBytes_GET_SIZE(tmpl) != 8 * nvals ||
        PyTuple_GET_SIZE(args) > 64 || !PyDict_Check(env_dict) ||
        PyTuple_GET_SIZE(env_keys) != PyTuple_GET_SIZE(env_vals)) {
        PyErr_SetString(PyExc_ValueError, "launch not supported natively");
        return NULL;
    }
    Fast *f = PyObject_GC_New(Fast, &FastType);
    if (!f) return NULL;
    f->vcall = Fast_vcall;
    f->dict = NULL; f->fn = NULL; f->argv = NULL; f->cpos = NULL; f->ctype = f->cval = NULL;
    f->env_key = f->env_val = NULL; f->pairs = NULL; f->tmpl = NULL;
    f->keep = PyList_New(0);
    if (!f->keep) goto error;
    f->nargs = nargs; f->nvals = nvals; f->dims_at = dims_at;
    f->env_dict = kept(f, env_dict);
    f->nenv = (int)PyTuple_GET_SIZE(env_keys);
    f->env_key = PyMem_Calloc(f->nenv + 1, sizeof(PyObject *));
    f->env_val = PyMem_Calloc(f->nenv + 1, sizeof(PyObject *));
    if (!f->env_key || !f->env_val || !f->env_dict) goto error;
    for (int k = 0; k < f->nenv; k++) {
        f->env_key[k] = kept(f, GET(env_keys, k));
        PyObject *val = GET(env_vals, k);
        f->env_val[k] = val == Py_None ? NULL : kept(f, val);
    }
    f->nconst = (int)PyTuple_GET_SIZE(consts);
    f->cpos = PyMem_Calloc(f->nconst + 1, sizeof(Py_ssize_t));
    f->ctype = PyMem_Calloc(f->nconst + 1, sizeof(PyObject *));
    f->cval = PyMem_Calloc(f->nconst + 1, sizeof(PyObject *));
    if (!f->cpos || !f->ctype || !f->cval) goto error;
    for (int k = 0; k < f->nconst; k++) {
        PyObject *c = GET(consts, k);
        f->cpos[k] = PyLong_AsSsize_t(GET(c, 0));
        if (f->cpos[k] < 0 || f->cpos[k] >= nargs) {
            PyErr_SetString(PyExc_ValueError, "constexpr position"); goto error;
        }
        f->ctype[k] = kept(f, GET(c, 1));
        f->cval[k] = kept(f, GET(c, 2));
    }
    f->narg = (int)PyTuple_GET_SIZE(args);
    f->argv = PyMem_Calloc(f->narg + 1, sizeof(Arg));
    if (!f->argv) goto error;
    for (int i = 0; i < f->narg; i++) {
        PyObject *t = GET(args, i);
        Arg *g = &f->argv[i];
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 17) {
            PyErr_SetString(PyExc_ValueError, "argument description"); goto error;
        }
        g->kind = AS_INT(GET(t, 0)); g->pos = AS_INT(GET(t, 1)); g->off = AS_INT(GET(t, 2));
        g->nd = AS_INT(GET(t, 3)); g->item = AS_INT(GET(t, 4)); g->inner = AS_INT(GET(t, 5));
        g->aligned = AS_INT(GET(t, 6)); g->wide = AS_INT(GET(t, 7));
        g->written = AS_INT(GET(t, 8)); g->ranged = AS_INT(GET(t, 9));
        g->type = kept(f, GET(t, 10)); g->dtype = kept(f, GET(t, 11));
        g->lo = PyLong_AsLongLong(GET(t, 12)); g->hi = PyLong_AsLongLong(GET(t, 13));
        g->divisible = AS_INT(GET(t, 14)); g->not_int32 = AS_INT(GET(t, 15));
        g->dtype_code = AS_INT(GET(t, 16));
        if (PyErr_Occurred()) goto error;
        int tensor = g->kind == K_TORCH || g->kind == K_NUMPY;
        int slots = tensor ? 3 + 2 * g->nd : 1;
        if (g->kind && (g->pos < 0 || g->pos >= nargs || g->off < 0 ||
                        g->off + slots > nvals || g->nd > MAX_RANK ||
                        (tensor && g->ranged && g->nd != 1) ||
                        (g->kind == K_NUMPY && (!numpy_ready || g->item <= 0)))) {
            PyErr_SetString(PyExc_ValueError, "argument description out of range"); goto error;
        }
        if (g->kind == K_INT && g->type != (PyObject *)&PyLong_Type) {
            PyErr_SetString(PyExc_ValueError, "ints must be of type int"); goto error;
        }
        if ((g->kind == K_F32 || g->kind == K_F64) && g->type != (PyObject *)&PyFloat_Type) {
            PyErr_SetString(PyExc_ValueError, "floats must be of type float"); goto error;
        }
        if (g->kind == K_BOOL && g->type != (PyObject *)&PyBool_Type) {
            PyErr_SetString(PyExc_ValueError, "bools must be of type bool"); goto error;
        }
    }
    f->npairs = (int)PyTuple_GET_SIZE(pairs);
    f->pairs = PyMem_Calloc(3 * f->npairs + 1, sizeof(int));
    if (!f->pairs) goto error;
    for (int k = 0; k < f->npairs; k++) {
        PyObject *p = GET(pairs, k);
        for (int m = 0; m < 3; m++) f->pairs[3 * k + m] = AS_INT(GET(p, m));
        int i = f->pairs[3 * k], j = f->pairs[3 * k + 1];
        if (i < 0 || j < 0 || i >= f->narg || j >= f->narg || !f->argv[i].ranged ||
            !f->argv[j].ranged) {
            PyErr_SetString(PyExc_ValueError, "overlap pair"); goto error;
        }
    }
    f->tmpl = PyMem_Malloc(8 * (size_t)nvals + 8);
    if (!f->tmpl) goto error;
    memcpy(f->tmpl, PyBytes_AS_STRING(tmpl), 8 * (size_t)nvals);
    f->library = kept(f, library);
    f->fn = Py_NewRef(fn);
    f->entry = PyLong_AsVoidPtr(entry);
    if (!f->entry) { if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "entry"); goto error; }
    f->refresh = kept(f, refresh); f->local = kept(f, local);
    f->new_buffer = kept(f, new_buffer); f->submit = kept(f, submit);
    f->interrupted = kept(f, interrupted); f->name = kept(f, name);
    f->torch_writable = kept(f, tw);
    if (PyErr_Occurred()) goto error;
    PyObject_GC_Track((PyObject *)f);
    return (PyObject *)f;
error:
    Py_DECREF(f);
    return NULL;
}

static PyTypeObject FastType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "flydsl.NativeFastLaunch",
    .tp_basicsize = sizeof(Fast),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_dealloc = Fast_dealloc,
    .tp_traverse = Fast_traverse,
    .tp_clear = Fast_clear,
    .tp_call = Fast_call,
    .tp_vectorcall_offset = offsetof(Fast, vcall),
    .tp_dictoffset = offsetof(Fast, dict),
    .tp_getattro = PyObject_GenericGetAttr,
    .tp_setattro = PyObject_GenericSetAttr,
    .tp_doc = "A specialization's native warm launch: fast(args, grid, block, smem, stream).",
};

/* torch_shim((data_ptr, sizes, strides, dim, dtype, device_type, layout), cpu, strided):
 * the shim functions' addresses and the codes of the CPU device and strided layout. */
static PyObject *set_torch_shim(PyObject *mod, PyObject *a) {
    PyObject *fns;
    int cpu, strided;
    if (!PyArg_ParseTuple(a, "O!ii", &PyTuple_Type, &fns, &cpu, &strided)) return NULL;
    if (PyTuple_GET_SIZE(fns) != 7) { PyErr_SetString(PyExc_ValueError, "7 functions"); return NULL; }
    void *p[7];
    for (int k = 0; k < 7; k++) {
        p[k] = PyLong_AsVoidPtr(PyTuple_GET_ITEM(fns, k));
        if (!p[k]) { if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "NULL"); return NULL; }
    }
    sh_data_ptr = (ShimPtr)p[0]; sh_sizes = (ShimInts)p[1]; sh_strides = (ShimInts)p[2];
    sh_dim = (ShimInt)p[3]; sh_dtype = (ShimCode)p[4]; sh_device_type = (ShimCode)p[5];
    sh_layout = (ShimCode)p[6];
    sh_cpu = cpu; sh_strided = strided;
    shim_ready = 1;
    Py_RETURN_NONE;
}

/* torch_is_neg(address): use at::native::is_neg at that address (0: the Python API). */
static PyObject *set_torch_is_neg(PyObject *mod, PyObject *a) {
    void *p = PyLong_AsVoidPtr(a);
    if (!p && PyErr_Occurred()) return NULL;
    sh_is_neg = (ShimFlag)p;
    Py_RETURN_NONE;
}

/* torch_neg(t): whether t has the negative bit, as the shim path reads it (None where
 * no reader is set), to check it against torch's Python API. */
static PyObject *torch_neg(PyObject *mod, PyObject *t) {
    if (!sh_is_neg) Py_RETURN_NONE;
    PyObject *x = PyObject_GetAttr(t, s_cdata);
    if (!x) return NULL;
    void *impl = PyLong_AsVoidPtr(x);
    Py_DECREF(x);
    if (!impl) { if (PyErr_Occurred()) return NULL; Py_RETURN_NONE; }
    return PyBool_FromLong(sh_is_neg((Handle)&impl));
}

/* torch_facts(t): (data pointer, sizes, strides, dtype code, device type, layout) of a
 * torch tensor read through the shim (to check it against torch's Python API), or
 * None where the shim cannot answer. */
static PyObject *torch_facts(PyObject *mod, PyObject *t) {
    if (!shim_ready) Py_RETURN_NONE;
    PyObject *x = PyObject_GetAttr(t, s_cdata);
    if (!x) return NULL;
    void *impl = PyLong_AsVoidPtr(x);
    Py_DECREF(x);
    if (!impl) { if (PyErr_Occurred()) return NULL; Py_RETURN_NONE; }
    Handle h = (Handle)&impl;
    int32_t dtype, device, layout;
    int64_t dim, *sizes, *strides;
    void *data;
    if (sh_layout(h, &layout) || layout != sh_strided || sh_dtype(h, &dtype) ||
        sh_device_type(h, &device) || sh_dim(h, &dim) || dim > MAX_RANK ||
        sh_sizes(h, &sizes) || sh_strides(h, &strides) || sh_data_ptr(h, &data))
        Py_RETURN_NONE;
    PyObject *sz = PyTuple_New(dim), *st = PyTuple_New(dim);
    if (!sz || !st) { Py_XDECREF(sz); Py_XDECREF(st); return NULL; }
    for (int64_t k = 0; k < dim; k++) {
        PyTuple_SET_ITEM(sz, k, PyLong_FromLongLong(sizes[k]));
        PyTuple_SET_ITEM(st, k, PyLong_FromLongLong(strides[k]));
    }
    return Py_BuildValue("(KNNiii)", (unsigned long long)(uintptr_t)data, sz, st, dtype, device,
                         layout);
}

/* numpy_layout(data, nd, dimensions, strides, descr, flags): the byte offsets of those
 * fields of an ndarray object. */
static PyObject *numpy_layout(PyObject *mod, PyObject *a) {
    if (!PyArg_ParseTuple(a, "nnnnnn", &np_data, &np_nd, &np_dims, &np_strides, &np_descr,
                          &np_flags))
        return NULL;
    numpy_ready = 1;
    Py_RETURN_NONE;
}

/* numpy_facts(a): (data, nd, shape, strides, descr, flags) read at those offsets. */
static PyObject *numpy_facts(PyObject *mod, PyObject *a) {
    if (!numpy_ready) Py_RETURN_NONE;
    int nd = FIELD(a, np_nd, int);
    if (nd < 0 || nd > 64) Py_RETURN_NONE;
    PyObject *sh = PyTuple_New(nd), *st = PyTuple_New(nd);
    if (!sh || !st) { Py_XDECREF(sh); Py_XDECREF(st); return NULL; }
    for (int k = 0; k < nd; k++) {
        PyTuple_SET_ITEM(sh, k, PyLong_FromSsize_t(FIELD(a, np_dims, Py_ssize_t *)[k]));
        PyTuple_SET_ITEM(st, k, PyLong_FromSsize_t(FIELD(a, np_strides, Py_ssize_t *)[k]));
    }
    return Py_BuildValue("(KiNNOi)",
                         (unsigned long long)(uintptr_t)FIELD(a, np_data, char *), nd, sh, st,
                         FIELD(a, np_descr, PyObject *), FIELD(a, np_flags, int));
}

/* store_pointers(args, spec, address, alignment) -> bool: a prepared launch's
 * tensors (runtime/prepared.py). spec: int32 triples (position in args, slot, flags:
 * 1 must have memory, 2 must be aligned). Each args[position] must be a torch tensor
 * read through the shim, without the negative bit, its data pointer non-NULL and a
 * multiple of `alignment` where the flags say; it is stored in the slots `slot` and
 * `slot + 1` of the int64 array at `address`. False as soon as one does not hold
 * (slots stored before stay: the caller launches nothing and stores them again). */
static PyObject *store_pointers(PyObject *mod, PyObject *const *a, Py_ssize_t n) {
    if (n != 4 || !PyBytes_Check(a[1])) {
        PyErr_SetString(PyExc_TypeError, "store_pointers(args, spec, address, alignment)");
        return NULL;
    }
    if (!shim_ready) Py_RETURN_FALSE;
    int64_t *v = (int64_t *)PyLong_AsVoidPtr(a[2]);
    long long alignment = PyLong_AsLongLong(a[3]);
    if ((!v || alignment <= 0) && !PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "address and alignment");
    if (PyErr_Occurred()) return NULL;
    PyObject *seq = PySequence_Fast(a[0], "args must be a sequence");
    if (!seq) return NULL;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    const int32_t *spec = (const int32_t *)PyBytes_AS_STRING(a[1]);
    Py_ssize_t count = PyBytes_GET_SIZE(a[1]) / (3 * (Py_ssize_t)sizeof(int32_t));
    int ok = 1;
    for (Py_ssize_t k = 0; k < count && ok; k++) {
        int32_t pos = spec[3 * k], off = spec[3 * k + 1], flags = spec[3 * k + 2];
        if (pos < 0 || pos >= len) { ok = 0; break; }
        PyObject *t = items[pos];
        PyObject *x = PyObject_GetAttr(t, s_cdata);
        if (!x) { PyErr_Clear(); ok = 0; break; }     /* not a torch tensor */
        void *impl = PyLong_AsVoidPtr(x);
        Py_DECREF(x);
        if (!impl) { PyErr_Clear(); ok = 0; break; }
        Handle h = (Handle)&impl;
        int32_t layout;
        if (sh_layout(h, &layout) || layout != sh_strided) { ok = 0; break; }
        int neg = sh_is_neg ? (int)sh_is_neg(h) : negative(t);
        if (neg) {
            if (neg < 0) PyErr_Clear();
            ok = 0; break;
        }
        void *data;
        if (sh_data_ptr(h, &data)) { ok = 0; break; }
        uintptr_t p = (uintptr_t)data;
        if (((flags & 1) && !p) || ((flags & 2) && p % (uintptr_t)alignment)) { ok = 0; break; }
        v[off] = v[off + 1] = (int64_t)p;
    }
    Py_DECREF(seq);
    return PyBool_FromLong(ok);
}

static PyMethodDef methods[] = {
    {"new", native_new, METH_VARARGS, "Build a native warm launch (see native_launch.py)."},
    {"torch_shim", set_torch_shim, METH_VARARGS, "Use torch's C shim for tensor facts."},
    {"torch_facts", torch_facts, METH_O, "A tensor's facts through the shim (or None)."},
    {"torch_is_neg", set_torch_is_neg, METH_O, "Read the negative bit at this address."},
    {"torch_neg", torch_neg, METH_O, "A tensor's negative bit as read (or None)."},
    {"numpy_layout", numpy_layout, METH_VARARGS, "Use these ndarray field offsets."},
    {"numpy_facts", numpy_facts, METH_O, "An ndarray's fields at those offsets."},
    {"store_pointers", (PyCFunction)(void (*)(void))store_pointers, METH_FASTCALL,
     "A prepared launch's tensor pointers, checked and stored into its slots."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_flydsl_native_launch", NULL, -1,
                                    methods};

PyMODINIT_FUNC PyInit__flydsl_native_launch(void) {
    s_cdata = PyUnicode_InternFromString("_cdata");
    s_dtype = PyUnicode_InternFromString("dtype");
    s_is_cpu = PyUnicode_InternFromString("is_cpu");
    s_is_inference = PyUnicode_InternFromString("is_inference");
    s_is_neg = PyUnicode_InternFromString("is_neg");
    s_stride = PyUnicode_InternFromString("stride");
    s_shape = PyUnicode_InternFromString("shape");
    s_data_ptr = PyUnicode_InternFromString("data_ptr");
    s_buf = PyUnicode_InternFromString("buf");
    s_values = PyUnicode_InternFromString("values");
    s_call = PyUnicode_InternFromString("call");
    if (!s_cdata || !s_dtype || !s_is_cpu || !s_is_inference || !s_is_neg || !s_stride ||
        !s_shape || !s_data_ptr || !s_buf || !s_values || !s_call)
        return NULL;
    if (PyType_Ready(&FastType) < 0) return NULL;
    return PyModule_Create(&module);
}
