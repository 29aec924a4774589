/* SPDX-License-Identifier: MIT */
/*
 * mt_kernels_ref.c — plain-loop reference kernels of mt_tensor.h: obviously correct, slow,
 * used by the tests to validate the fast kernels and as documentation of the math.
 * Threading: reentrant. Tests: tests/unit/test_tensor.c.
 */
#include "tensor/mt_tensor.h"

#include <math.h>
#include <string.h>

/* C(M,N) = alpha * op(A)(M,K) · op(B)(K,N) + beta * C; op(A)[i,p] = trans_a ? a[p,i] : a[i,p]. */
void mt_gemm_ref(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                 const float *a, size_t lda, const float *b, size_t ldb, float beta, float *c,
                 size_t ldc)
{
    for (size_t i = 0; i < m; i++) {
        for (size_t j = 0; j < n; j++) {
            double s = 0.0;
            for (size_t p = 0; p < k; p++) {
                float av = trans_a ? a[p * lda + i] : a[i * lda + p];
                float bv = trans_b ? b[j * ldb + p] : b[p * ldb + j];
                s += (double)av * bv;
            }
            c[i * ldc + j] = (float)(alpha * s + (beta == 0.0f ? 0.0 : beta * c[i * ldc + j]));
        }
    }
}

/* y(B,out)[i,o] = b[o] + Σ_p x[i,p] w[p,o] */
void mt_dense_forward_ref(float *y, const float *x, const float *w, const float *b, size_t batch,
                          size_t in, size_t out)
{
    for (size_t i = 0; i < batch; i++) {
        for (size_t o = 0; o < out; o++) {
            double s = b != NULL ? b[o] : 0.0;
            for (size_t p = 0; p < in; p++)
                s += (double)x[i * in + p] * w[p * out + o];
            y[i * out + o] = (float)s;
        }
    }
}

/* dx[i,p] = Σ_o dy[i,o] w[p,o]; dw[p,o] = Σ_i x[i,p] dy[i,o]; db[o] = Σ_i dy[i,o] */
void mt_dense_backward_ref(float *dx, float *dw, float *db, const float *dy, const float *x,
                           const float *w, size_t batch, size_t in, size_t out)
{
    for (size_t i = 0; dx != NULL && i < batch; i++) {
        for (size_t p = 0; p < in; p++) {
            double s = 0.0;
            for (size_t o = 0; o < out; o++)
                s += (double)dy[i * out + o] * w[p * out + o];
            dx[i * in + p] = (float)s;
        }
    }
    for (size_t p = 0; dw != NULL && p < in; p++) {
        for (size_t o = 0; o < out; o++) {
            double s = 0.0;
            for (size_t i = 0; i < batch; i++)
                s += (double)x[i * in + p] * dy[i * out + o];
            dw[p * out + o] = (float)s;
        }
    }
    for (size_t o = 0; db != NULL && o < out; o++) {
        double s = 0.0;
        for (size_t i = 0; i < batch; i++)
            s += dy[i * out + o];
        db[o] = (float)s;
    }
}

/* Input pixel (iy, ix) read by output (oy, ox) through kernel tap (ky, kx); false if padding. */
static bool conv_tap(const mt_conv2d_geom *g, size_t oy, size_t ox, size_t ky, size_t kx,
                     size_t *iy, size_t *ix)
{
    long pt = (long)mt_conv2d_pad_top(g), pl = (long)mt_conv2d_pad_left(g);
    long sh = g->sh == 0 ? 1 : (long)g->sh, sw = g->sw == 0 ? 1 : (long)g->sw;
    long y = (long)oy * sh + (long)ky - pt, x = (long)ox * sw + (long)kx - pl;
    if (y < 0 || x < 0 || y >= (long)g->h || x >= (long)g->w)
        return false;
    *iy = (size_t)y;
    *ix = (size_t)x;
    return true;
}

/* y[b,oy,ox,f] = bias[f] + Σ_{ky,kx,c} x[b, oy·sh+ky-pt, ox·sw+kx-pl, c] w[ky,kx,c,f] */
void mt_conv2d_forward_ref(float *y, const float *x, const float *w, const float *b,
                           const mt_conv2d_geom *g)
{
    size_t oh = mt_conv2d_out_h(g), ow = mt_conv2d_out_w(g);
    for (size_t n = 0; n < g->batch; n++)
        for (size_t oy = 0; oy < oh; oy++)
            for (size_t ox = 0; ox < ow; ox++)
                for (size_t f = 0; f < g->f; f++) {
                    double s = b != NULL ? b[f] : 0.0;
                    for (size_t ky = 0; ky < g->kh; ky++)
                        for (size_t kx = 0; kx < g->kw; kx++) {
                            size_t iy, ix;
                            if (!conv_tap(g, oy, ox, ky, kx, &iy, &ix))
                                continue;
                            for (size_t c = 0; c < g->c; c++)
                                s += (double)x[((n * g->h + iy) * g->w + ix) * g->c + c] *
                                     w[((ky * g->kw + kx) * g->c + c) * g->f + f];
                        }
                    y[((n * oh + oy) * ow + ox) * g->f + f] = (float)s;
                }
}

/* The adjoint of the forward: every product x·w contributes dy·w to dx and dy·x to dw. */
void mt_conv2d_backward_ref(float *dx, float *dw, float *db, const float *dy, const float *x,
                            const float *w, const mt_conv2d_geom *g)
{
    size_t oh = mt_conv2d_out_h(g), ow = mt_conv2d_out_w(g);
    if (dx != NULL)
        memset(dx, 0, g->batch * g->h * g->w * g->c * sizeof(float));
    if (dw != NULL)
        memset(dw, 0, g->kh * g->kw * g->c * g->f * sizeof(float));
    if (db != NULL)
        memset(db, 0, g->f * sizeof(float));
    for (size_t n = 0; n < g->batch; n++)
        for (size_t oy = 0; oy < oh; oy++)
            for (size_t ox = 0; ox < ow; ox++)
                for (size_t f = 0; f < g->f; f++) {
                    float d = dy[((n * oh + oy) * ow + ox) * g->f + f];
                    if (db != NULL)
                        db[f] += d;
                    for (size_t ky = 0; ky < g->kh; ky++)
                        for (size_t kx = 0; kx < g->kw; kx++) {
                            size_t iy, ix;
                            if (!conv_tap(g, oy, ox, ky, kx, &iy, &ix))
                                continue;
                            for (size_t c = 0; c < g->c; c++) {
                                size_t xi = ((n * g->h + iy) * g->w + ix) * g->c + c;
                                size_t wi = ((ky * g->kw + kx) * g->c + c) * g->f + f;
                                if (dx != NULL)
                                    dx[xi] += d * w[wi];
                                if (dw != NULL)
                                    dw[wi] += d * x[xi];
                            }
                        }
                }
}

/* y[b,oy,ox,c] = max over the 2x2 window x[b, 2oy+{0,1}, 2ox+{0,1}, c] (first maximum wins) */
void mt_maxpool2_forward_ref(float *y, int32_t *argmax, const float *x, size_t batch, size_t h,
                             size_t w, size_t c)
{
    size_t oh = h / 2, ow = w / 2;
    for (size_t b = 0; b < batch; b++)
        for (size_t oy = 0; oy < oh; oy++)
            for (size_t ox = 0; ox < ow; ox++)
                for (size_t ci = 0; ci < c; ci++) {
                    size_t best = ((b * h + 2 * oy) * w + 2 * ox) * c + ci;
                    for (size_t dy = 0; dy < 2; dy++)
                        for (size_t dx = 0; dx < 2; dx++) {
                            size_t i = ((b * h + 2 * oy + dy) * w + 2 * ox + dx) * c + ci;
                            if (x[i] > x[best])
                                best = i;
                        }
                    size_t o = ((b * oh + oy) * ow + ox) * c + ci;
                    y[o] = x[best];
                    argmax[o] = (int32_t)best;
                }
}

/* dx[i] = Σ_{o: argmax[o] = i} dy[o] */
void mt_maxpool2_backward_ref(float *dx, const float *dy, const int32_t *argmax, size_t n_in,
                              size_t n_out)
{
    for (size_t i = 0; i < n_in; i++) {
        float s = 0.0f;
        for (size_t o = 0; o < n_out; o++)
            if ((size_t)argmax[o] == i)
                s += dy[o];
        dx[i] = s;
    }
}

void mt_relu_forward_ref(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = fmaxf(x[i], 0.0f);
}

void mt_relu_backward_ref(float *dx, const float *dy, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

/* p = softmax(z) in double; loss = -log p[label]; dz = (p - onehot) * grad_scale */
mt_code mt_softmax_xent_ref(float *dlogits, double *loss_sum, size_t *correct, const float *logits,
                            const int32_t *labels, size_t batch, size_t k, float grad_scale,
                            mt_err *err)
{
    for (size_t i = 0; i < batch; i++)
        if (labels[i] < 0 || (size_t)labels[i] >= k)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "label %d of example %zu not in [0, %zu)",
                              (int)labels[i], i, k);
    for (size_t i = 0; i < batch; i++) {
        const float *z = logits + i * k;
        double m = z[0], s = 0.0;
        size_t am = 0;
        for (size_t j = 0; j < k; j++)
            if (z[j] > m) {
                m = z[j];
                am = j;
            }
        for (size_t j = 0; j < k; j++)
            s += exp(z[j] - m);
        *loss_sum += -((z[labels[i]] - m) - log(s));
        *correct += am == (size_t)labels[i];
        for (size_t j = 0; dlogits != NULL && j < k; j++)
            dlogits[i * k + j] =
                (float)((exp(z[j] - m) / s - (j == (size_t)labels[i] ? 1.0 : 0.0)) * grad_scale);
    }
    return MT_OK;
}

/* y[n,c] = gamma[c] (x[n,c] - mean[c]) / sqrt(var[c] + eps) + beta[c] */
void mt_bn_normalize_ref(float *y, float *xhat, const float *x, const float *mean, const float *var,
                         float eps, const float *gamma, const float *beta, size_t n, size_t c)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < c; j++) {
            double h = ((double)x[i * c + j] - mean[j]) / sqrt((double)var[j] + eps);
            if (xhat != NULL)
                xhat[i * c + j] = (float)h;
            y[i * c + j] =
                (float)((gamma != NULL ? gamma[j] : 1.0) * h + (beta != NULL ? beta[j] : 0.0));
        }
}

/* dx = gamma/σ (dy - mean_M(dy) - xhat · mean_M(dy·xhat)), means over the M global rows */
void mt_bn_backward_dx_ref(float *dx, const float *dy, const float *xhat, const float *gamma,
                           const float *var, float eps, const float *sum_dy,
                           const float *sum_dy_xhat, size_t m_global, size_t n, size_t c)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < c; j++) {
            double g = gamma != NULL ? gamma[j] : 1.0;
            double mdy = (double)sum_dy[j] / (double)m_global;
            double mdyh = (double)sum_dy_xhat[j] / (double)m_global;
            dx[i * c + j] = (float)(g / sqrt((double)var[j] + eps) *
                                    (dy[i * c + j] - mdy - xhat[i * c + j] * mdyh));
        }
}

void mt_dropout_forward_ref(float *y, const float *x, const uint8_t *mask, float scale, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = mask[i] != 0 ? x[i] * scale : 0.0f;
}

/* ------------------------------------------------------------------ attention */

void mt_attention_forward_ref(float *out, float *probs, const float *qkv, size_t batch, size_t t,
                              size_t heads, size_t hd, bool causal)
{
    size_t cin = heads * 3 * hd, cout = heads * hd;
    double scale = 1.0 / sqrt((double)hd);

    for (size_t b = 0; b < batch; b++)
        for (size_t h = 0; h < heads; h++) {
            const float *x = qkv + b * t * cin + h * 3 * hd;
            float *p = probs + (b * heads + h) * t * t;
            for (size_t i = 0; i < t; i++) {
                size_t n = causal ? i + 1 : t;
                double m = -INFINITY, sum = 0.0;
                for (size_t j = 0; j < n; j++) {
                    double s = 0.0;
                    for (size_t e = 0; e < hd; e++)
                        s += (double)x[i * cin + e] * x[j * cin + hd + e];
                    p[i * t + j] = (float)(s * scale);
                    m = p[i * t + j] > m ? p[i * t + j] : m;
                }
                for (size_t j = 0; j < n; j++)
                    sum += exp(p[i * t + j] - m);
                for (size_t j = 0; j < t; j++)
                    p[i * t + j] = j < n ? (float)(exp(p[i * t + j] - m) / sum) : 0.0f;
                for (size_t e = 0; e < hd; e++) {
                    double o = 0.0;
                    for (size_t j = 0; j < n; j++)
                        o += (double)p[i * t + j] * x[j * cin + 2 * hd + e];
                    out[(b * t + i) * cout + h * hd + e] = (float)o;
                }
            }
        }
}

void mt_attention_backward_ref(float *dqkv, float *scratch, const float *dout, const float *qkv,
                               const float *probs, size_t batch, size_t t, size_t heads, size_t hd,
                               bool causal)
{
    (void)causal; /* p is zero above the diagonal: the full sums are the causal ones */
    size_t cin = heads * 3 * hd, cout = heads * hd;
    double scale = 1.0 / sqrt((double)hd);

    for (size_t b = 0; b < batch; b++)
        for (size_t h = 0; h < heads; h++) {
            const float *x = qkv + b * t * cin + h * 3 * hd;
            const float *p = probs + (b * heads + h) * t * t, *dy = dout + b * t * cout + h * hd;
            float *dx = dqkv + b * t * cin + h * 3 * hd, *ds = scratch;
            for (size_t i = 0; i < t; i++) {
                double dot = 0.0;
                for (size_t j = 0; j < t; j++) {
                    double dp = 0.0;
                    for (size_t e = 0; e < hd; e++)
                        dp += (double)dy[i * cout + e] * x[j * cin + 2 * hd + e];
                    ds[i * t + j] = (float)dp;
                    dot += (double)p[i * t + j] * dp;
                }
                for (size_t j = 0; j < t; j++)
                    ds[i * t + j] = (float)(p[i * t + j] * (ds[i * t + j] - dot));
            }
            for (size_t i = 0; i < t; i++)
                for (size_t e = 0; e < hd; e++) {
                    double dq = 0.0, dk = 0.0, dv = 0.0;
                    for (size_t j = 0; j < t; j++) {
                        dq += (double)ds[i * t + j] * x[j * cin + hd + e];
                        dk += (double)ds[j * t + i] * x[j * cin + e];
                        dv += (double)p[j * t + i] * dy[j * cout + e];
                    }
                    dx[i * cin + e] = (float)(dq * scale);
                    dx[i * cin + hd + e] = (float)(dk * scale);
                    dx[i * cin + 2 * hd + e] = (float)dv;
                }
        }
}
