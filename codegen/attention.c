/* codegen/attention.c — fused attention (ir/ir.h), flash-style: no
 * [Tq, Tk] score matrix in memory. One iteration per (n, h, row): the
 * forward and attention_lse per query row, walking the keys in tiles of
 * TILE with an online max and sum (f32, rescaled per tile); dq per query
 * row and dk, dv per key row, each recomputing its scores from q, k and
 * the forward's log-sum-exp. Every output row has one owner and every
 * loop a fixed order, so the bits do not depend on threads. In C,
 * iteration i is (n, h, t) = (i / (H·T), i / T % H, i % T). On CUDA each
 * kernel is a block per tile of rows, a thread per row, with the other
 * side's rows staged in shared memory tile by tile (forward_tiled,
 * k_grad_q, kv_tiled), the arithmetic the C kernel's in the same order;
 * head dims over TILED_MAX_D keep the C text, a thread per row.
 */
#include <inttypes.h>
#include <stdio.h>

#include "codegen/internal.h"

enum { TILE = 32 }; /* keys per tile of the online softmax */

typedef struct {
    int64_t N, Tq, Tk, C, H, D;
    int causal;
    double scale, p;
    int64_t salt;
} attn;

/* The shape from q (input at) and k (at + 1), the attributes of n. */
static attn attn_of(cg_ctx *cx, const ir_node *n, int at) {
    const ir_type *q = cg_in_type(cx, n, at), *k = cg_in_type(cx, n, at + 1);
    int dropout = n->op != IR_OP_ATTENTION_LSE;
    return (attn){q->dim[0],
                  q->dim[1],
                  k->dim[1],
                  q->dim[2],
                  n->iattr[0],
                  q->dim[2] / n->iattr[0],
                  (int)n->iattr[1],
                  n->fattr[0],
                  dropout ? n->fattr[1] : 0,
                  dropout ? n->iattr[2] : 0};
}

/* Locals n, h, t of iteration i over rows of T, the row's first channel
 * `ro` in its [N, T, C] tensor and `bo`, the head's first channel in the
 * other side's tensor ([N, To, C]: keys for a query row, and back). */
static void decode(cg_str *b, const attn *a, int64_t T, int64_t To) {
    cg_str_printf(b,
                  "const idx_t n = i / %" PRId64 ", h = i / %" PRId64 " %% %" PRId64
                  ", t = i %% %" PRId64 ";\n"
                  "const idx_t ro = (n * %" PRId64 " + t) * %" PRId64 " + h * %" PRId64 ";\n"
                  "const idx_t bo = n * %" PRId64 " + h * %" PRId64 ";\n",
                  a->H * T, T, a->H, T, T, a->C, a->D, To * a->C, a->D);
}

/* With dropout: local z0, the key (input bK) mixed with the salt, the
 * start of ir_dropout_hash that keep() finishes per weight. */
static void key_init(cg_str *b, const attn *a, int k) {
    if (a->p == 0) return;
    cg_str_printf(b,
                  "unsigned long long z0 = 0;\n"
                  "for (int u = 0; u < 4; u++) z0 |= ((unsigned long long)(long long)b%d[u] & "
                  "0xffffull) << (16 * u);\n"
                  "z0 ^= %lluull;\n",
                  k, (unsigned long long)((uint64_t)a->salt * 0xd1b54a32d192ed03ull));
}

/* Local m, the dropout factor of weight (n, h, qrow, krow): 1 without
 * dropout, else 1/(1-p) where ir_dropout_hash keeps it, 0 where not. */
static void keep(cg_ctx *cx, cg_str *b, const attn *a, const char *qrow, const char *krow) {
    if (a->p == 0) {
        cg_str_printf(b, "const float m = 1.0f;\n");
        return;
    }
    char lit[40];
    cg_str_printf(b,
                  "unsigned long long z = z0 + (unsigned long long)(((n * %" PRId64
                  " + h) * %" PRId64 " + %s) * %" PRId64 " + %s) * 0x9e3779b97f4a7c15ull;\n"
                  "z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;\n"
                  "z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;\n"
                  "z ^= z >> 31;\n"
                  "const float m = (z >> 40) >= %lluull ? %s : 0.0f;\n",
                  a->H, a->Tq, qrow, a->Tk, krow, (unsigned long long)ir_dropout_threshold(a->p),
                  cg_lit(cx, 1.0 / (1.0 - a->p), 0, lit));
}

/* Loads `len` floats from bK (type t) at `at` into float name[len], each
 * times `mul` ("" for none, else " * <literal>"). */
static void load_row(cg_str *b, const char *name, int k, ir_dtype t, int64_t len, const char *at,
                     const char *mul) {
    cg_str_printf(b,
                  "float %s[%" PRId64 "];\n"
                  "for (idx_t c = 0; c < %" PRId64 "; c++) %s[c] = %sb%d[%s + c]%s%s;\n",
                  name, len, len, name, cg_ld(t), k, at, cg_end(t), mul);
}

/* Keys a query row sees, on average (the cost report). */
static int64_t keys_seen(const attn *a) {
    return a->causal ? a->Tk - a->Tq + (a->Tq + 1) / 2 : a->Tk;
}

/* One tile of keys j0 <= j < jend of the online softmax: the scores
 * qr·k_j (k_j[c] the text kx) into s[], the running max mx moves to the
 * tile's and the sum l and the output acc[] are rescaled once, then the
 * tile's weights added (with v_j[c] the text vx; lse: l only). The same
 * text, so the same order, per query row in C and per thread on CUDA. */
static void online_tile(cg_ctx *cx, cg_str *b, const attn *a, const char *jend, const char *kx,
                        const char *vx, int lse) {
    cg_str_printf(b,
                  "float s[%d], mt = mx;\n"
                  "for (idx_t j = j0; j < %s; j++) {\n"
                  "    float d = 0.0f;\n"
                  "    for (idx_t c = 0; c < %" PRId64 "; c++) d += qr[c] * %s;\n"
                  "    s[j - j0] = d;\n"
                  "    mt = d > mt ? d : mt;\n"
                  "}\n"
                  "const float r = expf(mx - mt);\n"
                  "l *= r;\n",
                  TILE, jend, a->D, kx);
    if (!lse) cg_str_printf(b, "for (idx_t c = 0; c < %" PRId64 "; c++) acc[c] *= r;\n", a->D);
    cg_str_printf(b,
                  "for (idx_t j = j0; j < %s; j++) {\n"
                  "    const float w = expf(s[j - j0] - mt);\n"
                  "    l += w;\n",
                  jend);
    if (!lse) {
        keep(cx, b, a, "t", "j");
        cg_str_printf(b, "    for (idx_t c = 0; c < %" PRId64 "; c++) acc[c] += w * m * %s;\n",
                      a->D, vx);
    }
    cg_str_printf(b, "}\nmx = mt;\n");
}

/* The forward's end: b0[i] = the log-sum-exp (lse), else row ro of b0 =
 * acc / l; `live` guards the store ("" for none). */
static void forward_store(cg_str *b, const attn *a, ir_dtype t, int lse, const char *live) {
    if (lse)
        cg_str_printf(b, "%sb0[%s] = %s(mx + logf(l))%s;\n", live,
                      *live ? "(n * H + h) * TQ + t" : "i", cg_st(t), cg_end(t));
    else
        cg_str_printf(b,
                      "%sfor (idx_t c = 0; c < %" PRId64 "; c++) b0[ro + c] = %s(acc[c] / l)%s;\n",
                      live, a->D, cg_st(t), cg_end(t));
}

/* attention (lse = 0: b0 = out) and attention_lse (lse = 1: b0 = the
 * row's log-sum-exp) of b1 = q, b2 = k, b3 = v, b4 = key (dropout), one
 * query row per iteration, keys read in place. */
static void forward_rows(cg_ctx *cx, cg_kdef *kd, const attn *a, int lse) {
    cg_str *b = &kd->body;
    char mul[48], lit[40], kx[96], vx[96];
    snprintf(mul, sizeof mul, " * %s", cg_lit(cx, a->scale, 0, lit));
    snprintf(kx, sizeof kx, "%sb2[bo + j * %" PRId64 " + c]%s", cg_ld(kd->type[2]), a->C,
             cg_end(kd->type[2]));
    snprintf(vx, sizeof vx, "%sb3[bo + j * %" PRId64 " + c]%s", cg_ld(kd->type[3]), a->C,
             cg_end(kd->type[3]));
    decode(b, a, a->Tq, a->Tk);
    cg_str_printf(b, "const idx_t end = %s%" PRId64 ";\n", a->causal ? "t + " : "",
                  a->causal ? a->Tk - a->Tq + 1 : a->Tk);
    key_init(b, a, 4);
    load_row(b, "qr", 1, kd->type[1], a->D, "ro", mul);
    if (lse)
        cg_str_printf(b, "(void)b3;\n");
    else
        cg_str_printf(b, "float acc[%" PRId64 "] = {0};\n", a->D);
    cg_str_printf(b,
                  "float mx = DPC_NEG_INF, l = 0.0f;\n"
                  "for (idx_t j0 = 0; j0 < end; j0 += %d) {\n"
                  "const idx_t j1 = j0 + %d < end ? j0 + %d : end;\n",
                  TILE, TILE, TILE);
    online_tile(cx, b, a, "j1", kx, vx, lse);
    cg_str_printf(b, "}\n");
    forward_store(b, a, kd->type[0], lse, "");
}

/* The CUDA kernels of a block of QT threads per (n, h, tile of QT query
 * rows), a thread per row: iteration i is (n, h, qt) = (i / (H·NQT),
 * i / NQT % H, i % NQT). Locals as decode's and the forward's `end`, plus
 * `live` (the row exists) and `last`, the block's last visible key plus
 * one. A dead thread reads row 0 and sees key 0, so it stays finite, and
 * stores nothing. */
static void tiled_head(cg_str *b, const attn *a, int64_t QT) {
    int64_t NQT = (a->Tq + QT - 1) / QT, off = a->Tk - a->Tq;
    cg_str_printf(b,
                  "const idx_t H = %" PRId64 ", TQ = %" PRId64 ", C = %" PRId64 ";\n"
                  "const idx_t n = i / (H * %" PRId64 "), h = i / %" PRId64 " %% H;\n"
                  "const idx_t t = i %% %" PRId64 " * %" PRId64 " + threadIdx.x;\n"
                  "const int live = t < TQ;\n"
                  "const idx_t ro = (n * TQ + (live ? t : 0)) * C + h * %" PRId64 ";\n"
                  "const idx_t bo = n * %" PRId64 " * C + h * %" PRId64 ";\n",
                  a->H, a->Tq, a->C, NQT, NQT, NQT, QT, a->D, a->Tk, a->D);
    if (a->causal)
        cg_str_printf(b,
                      "const idx_t end = live ? t + %" PRId64 " : 1;\n"
                      "const idx_t last0 = (i %% %" PRId64 " + 1) * %" PRId64 " + %" PRId64 ";\n"
                      "const idx_t last = last0 < %" PRId64 " ? last0 : %" PRId64 ";\n",
                      off + 1, NQT, QT, off, a->Tk, a->Tk);
    else
        cg_str_printf(b, "const idx_t end = %" PRId64 ", last = end;\n", a->Tk);
}

/* The shared tiles ks (from input bK) and vs (bV; none when V < 0) and the
 * loop over the block's tiles of TILE keys: each read in, coalesced,
 * between barriers; then `if (je > j0) {`, the keys j0 <= j < je this
 * thread sees. The caller closes both braces. */
static void tiled_keys_open(cg_str *b, const attn *a, const cg_kdef *kd, int K, int V) {
    cg_str_printf(b,
                  "DPC_SHARED_ARRAY(float, ks, %" PRId64 ");\n"
                  "DPC_SHARED_ARRAY(float, vs, %" PRId64 ");\n"
                  "%s"
                  "for (idx_t j0 = 0; j0 < last; j0 += %d) {\n"
                  "const idx_t j1 = j0 + %d < last ? j0 + %d : last, je = j1 < end ? j1 : end;\n"
                  "__syncthreads(); /* the previous tile's readers are done */\n"
                  "for (idx_t e = threadIdx.x; e < (j1 - j0) * %" PRId64 "; e += blockDim.x) {\n"
                  "    const idx_t at = bo + (j0 + e / %" PRId64 ") * C + e %% %" PRId64 ";\n"
                  "    ks[e] = %sb%d[at]%s;\n",
                  TILE * a->D, V < 0 ? 1 : TILE * a->D, V < 0 ? "(void)vs;\n" : "", TILE, TILE,
                  TILE, a->D, a->D, a->D, cg_ld(kd->type[K]), K, cg_end(kd->type[K]));
    if (V >= 0)
        cg_str_printf(b, "    vs[e] = %sb%d[at]%s;\n", cg_ld(kd->type[V]), V, cg_end(kd->type[V]));
    cg_str_printf(b, "}\n__syncthreads();\nif (je > j0) {\n");
}

/* The CUDA forward (tiled_head's blocks): online_tile on each tile of
 * keys and values in shared memory. */
static void forward_tiled(cg_ctx *cx, cg_kdef *kd, const attn *a, int lse) {
    cg_str *b = &kd->body;
    char mul[48], lit[40], kx[64], vx[64];
    snprintf(mul, sizeof mul, " * %s", cg_lit(cx, a->scale, 0, lit));
    snprintf(kx, sizeof kx, "ks[(j - j0) * %" PRId64 " + c]", a->D);
    snprintf(vx, sizeof vx, "vs[(j - j0) * %" PRId64 " + c]", a->D);
    tiled_head(b, a, kd->block);
    key_init(b, a, 4);
    load_row(b, "qr", 1, kd->type[1], a->D, "ro", mul);
    if (lse)
        cg_str_printf(b, "(void)b3;\n");
    else
        cg_str_printf(b, "float acc[%" PRId64 "] = {0};\n", a->D);
    cg_str_printf(b, "float mx = DPC_NEG_INF, l = 0.0f;\n");
    tiled_keys_open(b, a, kd, 2, lse ? -1 : 3);
    online_tile(cx, b, a, "je", kx, vx, lse);
    cg_str_printf(b, "}\n}\n");
    forward_store(b, a, kd->type[0], lse, "if (live) ");
}

/* Dims up to this run the shared-memory kernels on CUDA: two tiles of
 * TILE x D floats within 32 KiB. */
enum { TILED_MAX_D = 128 };

/* kd (its cost that of one row) as blocks of 32 or 64 of T rows (tiled_head's
 * for T = Tq): returns the launch's count of blocks. The cost of a block is that of
 * its live rows on average (--cost counts no dead thread). */
static int64_t tiled_rows(cg_kdef *kd, const attn *a, int64_t T) {
    kd->block = T <= 32 ? 32 : 64;
    int64_t tiles = (T + kd->block - 1) / kd->block;
    kd->serial = kd->cost;
    kd->cost *= (T + tiles - 1) / tiles;
    return a->N * a->H * tiles;
}
static int64_t tiled(cg_kdef *kd, const attn *a) { return tiled_rows(kd, a, a->Tq); }

static int k_forward(cg_ctx *cx, const ir_node *n, int lse, int64_t *count) {
    attn a = attn_of(cx, n, 0);
    const ir_type *q = cg_in_type(cx, n, 0), *k = cg_in_type(cx, n, 1), *v = cg_in_type(cx, n, 2);
    int64_t row = keys_seen(&a) * (lse ? 2 * a.D + 4 : 4 * a.D + 8) + 2 * a.D;
    cg_kdef kd = {.op = lse ? "attention_lse" : "attention",
                  .nargs = n->ninputs + 1,
                  .cost = row,
                  .writes = {1},
                  .type = {n->type.dtype, q->dtype, k->dtype, v->dtype, IR_F32}};
    *count = a.N * a.H * a.Tq;
    if (cx->dl->gpu_launch && a.D <= TILED_MAX_D) {
        *count = tiled(&kd, &a);
        forward_tiled(cx, &kd, &a, lse);
    } else {
        forward_rows(cx, &kd, &a, lse);
    }
    return cg_emit_kernel(cx, &kd);
}

/* dq's loop over keys jfrom <= j < jend (k_j[c] the text kx, v_j[c] vx):
 * P = exp(s - lse), dS = P·(m·dy_t·v_j - D_t), dq += dS·k_j. The same
 * text, so the same order, in C and on CUDA. */
static void dq_keys(cg_ctx *cx, cg_str *b, const attn *a, const char *jfrom, const char *jend,
                    const char *kx, const char *vx) {
    cg_str_printf(b,
                  "for (idx_t j = %s; j < %s; j++) {\n"
                  "    float sc = 0.0f, dp = 0.0f;\n"
                  "    for (idx_t c = 0; c < %" PRId64 "; c++) {\n"
                  "        sc += qr[c] * %s;\n"
                  "        dp += dyr[c] * %s;\n"
                  "    }\n"
                  "    const float pw = expf(sc - lse);\n",
                  jfrom, jend, a->D, kx, vx);
    keep(cx, b, a, "t", "j");
    cg_str_printf(b,
                  "    const float ds = pw * (m * dp - di);\n"
                  "    for (idx_t c = 0; c < %" PRId64 "; c++) acc[c] += ds * %s;\n"
                  "}\n",
                  a->D, kx);
}

/* attention_grad, which 0: dq row t of b1 = dy, b2 = q, b3 = k, b4 = v,
 * b5 = out, b6 = lse, b7 = key, D_t = dy_t·out_t first; on CUDA in
 * tiled_head's blocks with the keys and values in shared memory. */
static int k_grad_q(cg_ctx *cx, const ir_node *n, cg_kdef *kd, const attn *a) {
    cg_str *b = &kd->body;
    char mul[48], lit[40], kx[96], vx[96];
    snprintf(mul, sizeof mul, " * %s", cg_lit(cx, a->scale, 0, lit));
    int tiled = kd->block > 0;
    if (tiled) {
        tiled_head(b, a, kd->block);
        snprintf(kx, sizeof kx, "ks[(j - j0) * %" PRId64 " + c]", a->D);
        snprintf(vx, sizeof vx, "vs[(j - j0) * %" PRId64 " + c]", a->D);
    } else {
        decode(b, a, a->Tq, a->Tk);
        cg_str_printf(b, "const idx_t end = %s%" PRId64 ";\n", a->causal ? "t + " : "",
                      a->causal ? a->Tk - a->Tq + 1 : a->Tk);
        snprintf(kx, sizeof kx, "%sb3[bo + j * %" PRId64 " + c]%s", cg_ld(kd->type[3]), a->C,
                 cg_end(kd->type[3]));
        snprintf(vx, sizeof vx, "%sb4[bo + j * %" PRId64 " + c]%s", cg_ld(kd->type[4]), a->C,
                 cg_end(kd->type[4]));
    }
    key_init(b, a, 7);
    load_row(b, "qr", 2, kd->type[2], a->D, "ro", mul);
    load_row(b, "dyr", 1, kd->type[1], a->D, "ro", "");
    load_row(b, "orow", 5, kd->type[5], a->D, "ro", "");
    cg_str_printf(b,
                  "float di = 0.0f, acc[%" PRId64 "] = {0};\n"
                  "for (idx_t c = 0; c < %" PRId64 "; c++) di += dyr[c] * orow[c];\n"
                  "const float lse = %sb6[(n * %" PRId64 " + h) * %" PRId64 " + %s]%s;\n",
                  a->D, a->D, cg_ld(kd->type[6]), a->H, a->Tq, tiled ? "(live ? t : 0)" : "t",
                  cg_end(kd->type[6]));
    if (tiled) {
        tiled_keys_open(b, a, kd, 3, 4);
        dq_keys(cx, b, a, "j0", "je", kx, vx);
        cg_str_printf(b, "}\n}\nif (live) ");
    } else {
        dq_keys(cx, b, a, "0", "end", kx, vx);
    }
    cg_str_printf(b, "for (idx_t c = 0; c < %" PRId64 "; c++) b0[ro + c] = %s(acc[c]%s)%s;\n", a->D,
                  cg_st(n->type.dtype), mul, cg_end(n->type.dtype));
    return 0;
}

/* attention_grad, which 1 (dk) or 2 (dv): key row t, over the queries
 * that see it (inputs as k_grad_q's). dv += P·m·dy_u; dk += dS·q_u with
 * D_u = dy_u·out_u recomputed per query. */
static int k_grad_kv(cg_ctx *cx, const ir_node *n, cg_kdef *kd, const attn *a, int dk) {
    cg_str *b = &kd->body;
    char mul[48], lit[40];
    snprintf(mul, sizeof mul, " * %s", cg_lit(cx, a->scale, 0, lit));
    ir_dtype dyt = kd->type[1], qt = kd->type[2], ot = kd->type[5];
    int64_t off = a->Tk - a->Tq;
    decode(b, a, a->Tk, a->Tq);
    if (a->causal)
        cg_str_printf(b, "const idx_t start = t > %" PRId64 " ? t - %" PRId64 " : 0;\n", off, off);
    else
        cg_str_printf(b, "const idx_t start = 0;\n");
    key_init(b, a, 7);
    load_row(b, "kr", 3, kd->type[3], a->D, "ro", mul);
    if (dk) load_row(b, "vr", 4, kd->type[4], a->D, "ro", "");
    cg_str_printf(b,
                  "float acc[%" PRId64 "] = {0};\n"
                  "for (idx_t u = start; u < %" PRId64 "; u++) {\n"
                  "    const idx_t qo = bo + u * %" PRId64 ";\n"
                  "    float sc = 0.0f;\n"
                  "    for (idx_t c = 0; c < %" PRId64 "; c++) sc += kr[c] * %sb2[qo + c]%s;\n"
                  "    const float pw = expf(sc - %sb6[(n * %" PRId64 " + h) * %" PRId64
                  " + u]%s);\n",
                  a->D, a->Tq, a->C, a->D, cg_ld(qt), cg_end(qt), cg_ld(kd->type[6]), a->H, a->Tq,
                  cg_end(kd->type[6]));
    keep(cx, b, a, "u", "t");
    if (dk)
        cg_str_printf(b,
                      "    float dp = 0.0f, di = 0.0f;\n"
                      "    for (idx_t c = 0; c < %" PRId64 "; c++) {\n"
                      "        const float g = %sb1[qo + c]%s;\n"
                      "        dp += g * vr[c];\n"
                      "        di += g * %sb5[qo + c]%s;\n"
                      "    }\n"
                      "    const float ds = pw * (m * dp - di);\n"
                      "    for (idx_t c = 0; c < %" PRId64 "; c++) acc[c] += ds * %sb2[qo + c]%s;\n"
                      "}\n",
                      a->D, cg_ld(dyt), cg_end(dyt), cg_ld(ot), cg_end(ot), a->D, cg_ld(qt),
                      cg_end(qt));
    else
        cg_str_printf(b,
                      "    for (idx_t c = 0; c < %" PRId64
                      "; c++) acc[c] += pw * m * %sb1[qo + c]%s;\n"
                      "}\n"
                      "(void)b5;\n",
                      a->D, cg_ld(dyt), cg_end(dyt));
    cg_str_printf(b, "for (idx_t c = 0; c < %" PRId64 "; c++) b0[ro + c] = %s(acc[c]%s)%s;\n", a->D,
                  cg_st(n->type.dtype), dk ? mul : "", cg_end(n->type.dtype));
    return 0;
}

/* The CUDA dk (dk = 1) and dv: a block per (n, h, tile of KB key rows), a
 * thread per key row; each tile of TILE queries (q, dy, their lse and,
 * for dk, D_u = dy_u·out_u) staged in shared memory between barriers,
 * then k_grad_kv's arithmetic in its order over the queries the row's
 * key is visible to. Iteration i is (n, h, kt) = (i / (H·NKT), i / NKT %
 * H, i % NKT). A dead thread (t >= Tk) sees no query and stores nothing. */
static void kv_tiled(cg_ctx *cx, cg_kdef *kd, const attn *a, int dk) {
    cg_str *b = &kd->body;
    int64_t KB = kd->block, NKT = (a->Tk + KB - 1) / KB, off = a->Tk - a->Tq, D = a->D;
    char mul[48], lit[40];
    snprintf(mul, sizeof mul, " * %s", cg_lit(cx, a->scale, 0, lit));
    ir_dtype dyt = kd->type[1], qt = kd->type[2], ot = kd->type[5], lt = kd->type[6];
    cg_str_printf(b,
                  "const idx_t H = %" PRId64 ", TQ = %" PRId64 ", C = %" PRId64 ";\n"
                  "const idx_t n = i / (H * %" PRId64 "), h = i / %" PRId64 " %% H;\n"
                  "const idx_t t = i %% %" PRId64 " * %" PRId64 " + threadIdx.x;\n"
                  "const int live = t < %" PRId64 ";\n"
                  "const idx_t ro = (n * %" PRId64 " + (live ? t : 0)) * C + h * %" PRId64 ";\n"
                  "const idx_t bo = n * TQ * C + h * %" PRId64 ";\n",
                  a->H, a->Tq, a->C, NKT, NKT, NKT, KB, a->Tk, a->Tk, D, D);
    if (a->causal)
        cg_str_printf(b,
                      "const idx_t start = !live ? TQ : t > %" PRId64 " ? t - %" PRId64 " : 0;\n"
                      "const idx_t f0 = i %% %" PRId64 " * %" PRId64 ";\n"
                      "const idx_t first = f0 > %" PRId64 " ? f0 - %" PRId64 " : 0;\n",
                      off, off, NKT, KB, off, off);
    else
        cg_str_printf(b, "const idx_t start = live ? 0 : TQ, first = 0;\n");
    key_init(b, a, 7);
    load_row(b, "kr", 3, kd->type[3], D, "ro", mul);
    if (dk) load_row(b, "vr", 4, kd->type[4], D, "ro", "");
    cg_str_printf(b,
                  "float acc[%" PRId64 "] = {0};\n"
                  "DPC_SHARED_ARRAY(float, qs, %" PRId64 ");\n"
                  "DPC_SHARED_ARRAY(float, gs, %" PRId64 ");\n"
                  "DPC_SHARED_ARRAY(float, ls, %d);\n"
                  "DPC_SHARED_ARRAY(float, dd, %d);\n"
                  "for (idx_t u0 = first; u0 < TQ; u0 += %d) {\n"
                  "const idx_t u1 = u0 + %d < TQ ? u0 + %d : TQ, ub = u0 > start ? u0 : start;\n"
                  "__syncthreads(); /* the previous tile's readers are done */\n"
                  "for (idx_t e = threadIdx.x; e < (u1 - u0) * %" PRId64 "; e += blockDim.x) {\n"
                  "    const idx_t at = bo + (u0 + e / %" PRId64 ") * C + e %% %" PRId64 ";\n"
                  "    qs[e] = %sb2[at]%s;\n"
                  "    gs[e] = %sb1[at]%s;\n"
                  "}\n"
                  "for (idx_t e = threadIdx.x; e < u1 - u0; e += blockDim.x) {\n"
                  "    ls[e] = %sb6[(n * H + h) * TQ + u0 + e]%s;\n"
                  "    float d = 0.0f;\n",
                  D, TILE * D, TILE * D, TILE, dk ? TILE : 1, TILE, TILE, TILE, D, D, D, cg_ld(qt),
                  cg_end(qt), cg_ld(dyt), cg_end(dyt), cg_ld(lt), cg_end(lt));
    if (dk) /* D_u in k_grad_kv's order: over c, the products dy·out */
        cg_str_printf(
            b,
            "    for (idx_t c = 0; c < %" PRId64 "; c++)\n"
            "        d += %sb1[bo + (u0 + e) * C + c]%s * %sb5[bo + (u0 + e) * C + c]%s;\n"
            "    dd[e] = d;\n",
            D, cg_ld(dyt), cg_end(dyt), cg_ld(ot), cg_end(ot));
    else
        cg_str_printf(b, "    (void)d;\n    (void)dd;\n    (void)b5;\n");
    cg_str_printf(b,
                  "}\n"
                  "__syncthreads();\n"
                  "for (idx_t u = ub; u < u1; u++) {\n"
                  "    const idx_t qo = (u - u0) * %" PRId64 ";\n"
                  "    float sc = 0.0f;\n"
                  "    for (idx_t c = 0; c < %" PRId64 "; c++) sc += kr[c] * qs[qo + c];\n"
                  "    const float pw = expf(sc - ls[u - u0]);\n",
                  D, D);
    keep(cx, b, a, "u", "t");
    if (dk)
        cg_str_printf(b,
                      "    float dp = 0.0f;\n"
                      "    for (idx_t c = 0; c < %" PRId64 "; c++) dp += gs[qo + c] * vr[c];\n"
                      "    const float ds = pw * (m * dp - dd[u - u0]);\n"
                      "    for (idx_t c = 0; c < %" PRId64 "; c++) acc[c] += ds * qs[qo + c];\n",
                      D, D);
    else
        cg_str_printf(
            b, "    for (idx_t c = 0; c < %" PRId64 "; c++) acc[c] += pw * m * gs[qo + c];\n", D);
    cg_str_printf(b,
                  "}\n}\n"
                  "if (live)\n"
                  "    for (idx_t c = 0; c < %" PRId64 "; c++) b0[ro + c] = %s(acc[c]%s)%s;\n",
                  D, cg_st(kd->type[0]), dk ? mul : "", cg_end(kd->type[0]));
}

static int k_grad(cg_ctx *cx, const ir_node *n, int64_t *count) {
    attn a = attn_of(cx, n, 1);
    int which = (int)n->iattr[3];
    int64_t seen = keys_seen(&a); /* also the queries an average key is seen by, times Tq/Tk */
    cg_kdef kd = {.op = which == 0   ? "attention_dq"
                        : which == 1 ? "attention_dk"
                                     : "attention_dv",
                  .nargs = n->ninputs + 1,
                  .writes = {1},
                  .type = {n->type.dtype}};
    for (int j = 0; j < n->ninputs && j < 6; j++) kd.type[j + 1] = cg_in_type(cx, n, j)->dtype;
    kd.type[7] = IR_F32;
    *count = a.N * a.H * (which ? a.Tk : a.Tq);
    if (which == 0) {
        kd.cost = seen * (6 * a.D + 12) + 6 * a.D;
        if (cx->dl->gpu_launch && a.D <= TILED_MAX_D) *count = tiled(&kd, &a);
        k_grad_q(cx, n, &kd, &a);
    } else {
        kd.cost = seen * a.Tq / a.Tk * (which == 1 ? 8 * a.D + 12 : 4 * a.D + 8) + 4 * a.D;
        if (cx->dl->gpu_launch && a.D <= TILED_MAX_D) {
            *count = tiled_rows(&kd, &a, a.Tk);
            kv_tiled(cx, &kd, &a, which == 1);
        } else {
            k_grad_kv(cx, n, &kd, &a, which == 1);
        }
    }
    return cg_emit_kernel(cx, &kd);
}

int cg_render_attention(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    if (n->op != IR_OP_ATTENTION_GRAD) {
        int64_t count;
        int k = k_forward(cx, n, n->op == IR_OP_ATTENTION_LSE, &count);
        return cg_simple_step(cx, node, k, count);
    }
    int64_t count;
    int k = k_grad(cx, n, &count);
    return cg_simple_step(cx, node, k, count);
}
