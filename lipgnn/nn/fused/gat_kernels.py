r"""Compiled CPU loops (numba) of the GAT layer family's one-operation paths: a whole GAT or GAT-Lip layer
(LipschitzNorm's eq. (17)) as one autograd operation, for small graphs (:mod:`lipgnn.nn.fused.gat_small`, any head
count) and for one head on larger graphs (:mod:`lipgnn.nn.fused.gat_one_head`).

Those modules state the formulas (forward and backward), why each path is written by hand and where each one
applies; they hold the autograd operations that call these loops, with the general CSR path
(:class:`lipgnn.nn.fused.FusedLipGATConv`) as their eager twin. Here are only the loops:

- ``small_scores``, ``small_aggregate``, ``small_backward``: ``gat_small``'s forward in two loops around torch's
  ``exp_`` (the scores shifted by their row maxima; the normalisation, attention dropout, aggregation, bias and an
  optional ELU) and its backward in one loop, heads innermost.
- ``one_head_scores``, ``one_head_aggregate``, ``one_head_aggregate_elu``, ``one_head_score_backward``,
  ``one_head_node_backward``: ``gat_one_head``'s, with every per-edge quantity a scalar.

The loops are compiled with the decorators of :mod:`lipgnn.nn.fused.kernels` (numba, cached on disk next to this
file); a following ELU reuses :mod:`lipgnn.nn.fused.elementwise_kernels`' row code.
"""

from __future__ import annotations

import numpy as np

from lipgnn.nn.fused import elementwise_kernels
from lipgnn.nn.fused.kernels import _jit_fast, _jit_fast_div, _jit_inline_div, numba

__all__ = [
    "one_head_aggregate", "one_head_aggregate_elu", "one_head_node_backward", "one_head_score_backward",
    "one_head_scores", "small_aggregate", "small_backward", "small_scores",
]

if numba is not None:
    from lipgnn.nn.fused.elementwise_kernels import _bias_elu_row, _elu_row_scratch

    # gat_small's loops (any head count)
    # Arithmetic stays in the tensors' float type (the scalars ``zero``, ``one``, ``inv_heads`` and ``slope``
    # are passed in it): a float literal, a Python float or an integer operand would promote the loops to
    # float64 and the exponentials to double ``exp``. Tree batches have one to three edges per row, so every
    # loop visits a row's edges with the heads innermost, and the channel loops run over a row's H·C values
    # at once, with per-head factors spread to H·C-sized scratch rows first: LLVM vectorises those flat loops
    # (the per-head 8-channel loops ran about 3x slower).

    @_jit_fast
    def small_scores(z, att_src, att_dst, rowptr, col, slope, alpha, node, lip, att_norm, lip_alpha, eps, zero,
                     one):  # pragma: no cover
        # First half of the forward. z [N, H·C], att_* [H·C]; written: node [6, N, H] = the score terms s, t, the
        # squared norms sq = ‖z_v,h‖², and with ``lip`` (eq. (17)) per target scale = α / c_i, nmax = max_j ‖z_j‖²
        # and ties (its count; rows without edges leave these three unwritten, nothing reads them); alpha [E, H] the
        # scores shifted by their row's maximum (<= 0; exponentiated by the caller); with ``lip`` also
        # att_norm [H] = sqrt(‖a_src,h‖² + ‖a_dst,h‖² + eps²).
        n, hc = z.shape
        heads = node.shape[2]
        width = hc // heads
        s, t, sq, scale, nmax, ties = node[0], node[1], node[2], node[3], node[4], node[5]
        if lip:
            for h in range(heads):
                q = eps * eps
                for c in range(width):
                    a = att_src[h * width + c]
                    b = att_dst[h * width + c]
                    q += a * a + b * b
                att_norm[h] = np.sqrt(q)
        prod_s = np.empty(hc, z.dtype)
        prod_t = np.empty(hc, z.dtype)
        prod_q = np.empty(hc, z.dtype)
        for v in range(n):
            for k in range(hc):
                prod_s[k] = z[v, k] * att_src[k]
                prod_t[k] = z[v, k] * att_dst[k]
                prod_q[k] = z[v, k] * z[v, k]
            for h in range(heads):
                a = zero
                b = zero
                q = zero
                for c in range(width):
                    a += prod_s[h * width + c]
                    b += prod_t[h * width + c]
                    q += prod_q[h * width + c]
                s[v, h] = a
                t[v, h] = b
                sq[v, h] = q
        m = np.empty(heads, z.dtype)
        k_row = np.empty(heads, z.dtype)
        for i in range(n):
            start, stop = rowptr[i], rowptr[i + 1]
            if start == stop:
                continue
            for h in range(heads):
                k_row[h] = one
            if lip:  # eq. (17): c_i = ‖a_h‖ sqrt(‖z_i‖² + max_j ‖z_j‖²) + eps, from 0 like the general path
                for h in range(heads):
                    best = zero
                    for e in range(start, stop):
                        q = sq[col[e], h]
                        best = q if q > best else best
                    count = zero
                    for e in range(start, stop):
                        if sq[col[e], h] == best:
                            count += one
                    c_i = att_norm[h] * np.sqrt(sq[i, h] + best + eps * eps) + eps
                    k_row[h] = lip_alpha / c_i
                    scale[i, h] = k_row[h]
                    nmax[i, h] = best
                    ties[i, h] = count
            for e in range(start, stop):
                j = col[e]
                for h in range(heads):
                    u = (s[j, h] + t[i, h]) * k_row[h]
                    u = u if u > zero else u * slope
                    alpha[e, h] = u
                    if e == start or u > m[h]:
                        m[h] = u
            for e in range(start, stop):
                for h in range(heads):
                    alpha[e, h] -= m[h]

    @_jit_fast
    def small_aggregate(z, rowptr, col, bias, concat, out, alpha, dropped, drop, elu, elu_alpha, zero, one,
                        inv_heads):  # pragma: no cover
        # Second half: alpha [E, H] holds exp(shifted scores); normalised in place (PyG's softmax), then
        # out [N, H·C] (concat) or [N, C] = bias + the rows' weighted sums of z [N, H·C]; with ``dropped`` the
        # weights are multiplied by drop [E, H] (attention dropout: 1 / (1 - p) or 0), alpha keeps them undropped;
        # with ``elu`` (float32 only: elementwise_kernels._bias_elu_row's polynomial) each finished row becomes ELU(row)
        # while it is in cache, as elementwise_kernels.bias_elu would in a second pass
        n, hc = z.shape
        heads = alpha.shape[1]
        width = hc // heads
        total = np.empty(heads, z.dtype)
        weight = np.empty(hc, z.dtype)
        row = np.empty(hc, z.dtype)
        f_dim = out.shape[1]
        no_bias = np.zeros(f_dim, z.dtype)
        elu_h, elu_poly, elu_bits, elu_pow2 = elementwise_kernels._elu_row_scratch(f_dim)
        for i in range(n):
            start, stop = rowptr[i], rowptr[i + 1]
            for k in range(hc):
                row[k] = zero
            if start < stop:
                for h in range(heads):
                    total[h] = zero
                for e in range(start, stop):
                    for h in range(heads):
                        total[h] += alpha[e, h]
                for h in range(heads):
                    total[h] = one / (total[h] + np.float32(1e-16))
                for e in range(start, stop):
                    j = col[e]
                    for h in range(heads):
                        w = alpha[e, h] * total[h]
                        alpha[e, h] = w
                        if dropped:
                            w = w * drop[e, h]
                        for c in range(width):
                            weight[h * width + c] = w
                    for k in range(hc):
                        row[k] += weight[k] * z[j, k]
            if concat:
                for k in range(hc):
                    out[i, k] = bias[k] + row[k]
            else:
                for c in range(width):
                    acc = zero
                    for h in range(heads):
                        acc += row[h * width + c]
                    out[i, c] = bias[c] + acc * inv_heads
            if elu:
                elementwise_kernels._bias_elu_row(out[i], no_bias, out[i], elu_alpha, one, elu_h, elu_poly, elu_bits,
                                                  elu_pow2)

    @_jit_fast
    def small_backward(grad, z, att_src, att_dst, rowptr, col, slope, concat, alpha, dropped, drop, node, lip,
                       att_norm, lip_alpha, eps, grad_z, grad_att_src, grad_att_dst, grad_bias, delta, grad_node, elu,
                       y, elu_alpha, zero, one, inv_heads):  # pragma: no cover
        # grad [N, H·C] or [N, C]; z, grad_z [N, H·C] (grad_z zeroed); att_* [H·C]; alpha (undropped), dropped,
        # drop, node and att_norm as the forward had them; grad_node [3, N, H] scratch (zeroed): the gradients of s,
        # t and sq; written: grad_att_* [H·C], grad_bias [H·C] or [C] (summed in float64); delta [max degree, H]
        # scratch. With attention dropout the weights are a·m (m = drop[e, h]), so ∂z_j gets a·m·g_i and the
        # softmax sees ∂a = m·(g_i·z_j). With ``elu``, grad is the ELU output's and y that output: each row is
        # first taken through the ELU (∂/∂x = 1 for y > 0, y + α otherwise: the rule of
        # elementwise_kernels.bias_elu_backward).
        n, hc = z.shape
        heads = node.shape[2]
        width = hc // heads
        two = one + one
        s, t, sq, scale, nmax, ties = node[0], node[1], node[2], node[3], node[4], node[5]
        grad_s, grad_t, grad_sq = grad_node[0], grad_node[1], grad_node[2]
        g_row = np.empty(hc, z.dtype)
        prod = np.empty(hc, z.dtype)
        weight = np.empty(hc, z.dtype)
        weighted = np.empty(heads, z.dtype)
        grad_k = np.empty(heads, z.dtype)
        grad_att_norm = np.zeros(heads, z.dtype)
        bias_acc = np.zeros(grad.shape[1], np.float64)  # a sum over all nodes
        g_out = np.empty(grad.shape[1], z.dtype)
        for i in range(n):
            start, stop = rowptr[i], rowptr[i + 1]
            for k in range(grad.shape[1]):
                g = grad[i, k]
                if elu:
                    v = y[i, k]
                    g = g * (v + elu_alpha) if v <= zero else g
                g_out[k] = g
                bias_acc[k] += g
            if concat:
                for k in range(hc):
                    g_row[k] = g_out[k]
            else:  # the mean over heads: every head's output gets 1/H of the gradient
                for h in range(heads):
                    for c in range(width):
                        g_row[h * width + c] = g_out[c] * inv_heads
            for h in range(heads):
                weighted[h] = zero
                grad_k[h] = zero
            for e in range(start, stop):
                j = col[e]
                for k in range(hc):
                    prod[k] = g_row[k] * z[j, k]
                for h in range(heads):
                    d = zero
                    for c in range(width):
                        d += prod[h * width + c]
                    a = alpha[e, h]
                    w = a
                    if dropped:
                        d = d * drop[e, h]
                        w = a * drop[e, h]
                    delta[e - start, h] = d
                    weighted[h] += a * d
                    for c in range(width):
                        weight[h * width + c] = w
                for k in range(hc):
                    grad_z[j, k] += weight[k] * g_row[k]
            for e in range(start, stop):
                j = col[e]
                for h in range(heads):
                    p = s[j, h] + t[i, h]
                    de = alpha[e, h] * (delta[e - start, h] - weighted[h])
                    de = de if p > zero else de * slope  # the sign of p · α / c_i is p's
                    if lip:
                        grad_k[h] += de * p
                        de = de * scale[i, h]
                    grad_s[j, h] += de
                    grad_t[i, h] += de
            if lip and start < stop:
                for h in range(heads):
                    # k = α / c: dL/dc = -dL/dk · k² / α; c = A R + eps, R = sqrt(‖z_i‖² + M_i + eps²)
                    k_i = scale[i, h]
                    r_i = np.sqrt(sq[i, h] + nmax[i, h] + eps * eps)
                    grad_c = -grad_k[h] * k_i * k_i / lip_alpha
                    grad_att_norm[h] += grad_c * r_i
                    grad_q = grad_c * att_norm[h] / (two * r_i)
                    grad_sq[i, h] += grad_q
                    share = grad_q / ties[i, h]  # the maximum's gradient, split among tied sources
                    for e in range(start, stop):
                        if sq[col[e], h] == nmax[i, h]:
                            grad_sq[col[e], h] += share
        acc_src = np.zeros(hc, z.dtype)
        acc_dst = np.zeros(hc, z.dtype)
        for v in range(n):
            for h in range(heads):
                for c in range(width):
                    prod[h * width + c] = grad_s[v, h]
                    weight[h * width + c] = grad_t[v, h]
                    g_row[h * width + c] = two * grad_sq[v, h]
            for k in range(hc):
                zk = z[v, k]
                grad_z[v, k] += prod[k] * att_src[k] + weight[k] * att_dst[k] + g_row[k] * zk
                acc_src[k] += prod[k] * zk
                acc_dst[k] += weight[k] * zk
        for h in range(heads):
            # with eq. (17), through ‖a_h‖ = sqrt(‖a_src,h‖² + ‖a_dst,h‖² + eps²): ∂‖a_h‖/∂a = a / ‖a_h‖
            f = grad_att_norm[h] / att_norm[h] if lip else zero
            for c in range(width):
                k = h * width + c
                grad_att_src[k] = acc_src[k] + f * att_src[k]
                grad_att_dst[k] = acc_dst[k] + f * att_dst[k]
        for k in range(grad.shape[1]):
            grad_bias[k] = bias_acc[k]

    # gat_one_head's loops (one head). Reassociated sums let LLVM vectorise the channel loops; the numpy error model
    # drops the zero-divisor check (the divisors here are sums of exponentials plus 1e-16, c_i >= eps, tie counts
    # >= 1). The row helper is inlined into its callers' loops at numba's IR level: left as a call, it cost 0.5 ms a
    # PubMed layer (1.99 against 1.49 ms for the ELU aggregation, one thread).

    @_jit_fast_div
    def one_head_scores(z, att_src, att_dst, rowptr, col, slope, alpha, node, lip, att_norm, lip_alpha, eps, zero,
                        one):  # pragma: no cover
        # z [N, C], att_* [C]; written: node [6, N] = s, t, sq = ‖z_v‖², and with ``lip`` per target
        # scale = α / c_i, nmax = max_j ‖z_j‖² and ties (its count); alpha [E] the scores shifted by their row's
        # maximum (<= 0, exponentiated by the caller). Rows without edges leave scale, nmax, ties unwritten.
        n, width = z.shape
        s, t, sq, scale, nmax, ties = node[0], node[1], node[2], node[3], node[4], node[5]
        for v in range(n):
            a = zero
            b = zero
            q = zero
            for c in range(width):
                zc = z[v, c]
                a += zc * att_src[c]
                b += zc * att_dst[c]
                q += zc * zc
            s[v] = a
            t[v] = b
            sq[v] = q
        norm = att_norm[0]
        for i in range(n):
            start, stop = rowptr[i], rowptr[i + 1]
            if start == stop:
                continue
            k = one
            if lip:  # eq. (17), the neighbour maximum from 0 like the general path
                best = zero
                count = zero
                for e in range(start, stop):
                    q = sq[col[e]]
                    if q > best:
                        best = q
                        count = one
                    elif q == best:
                        count += one
                k = lip_alpha / (norm * np.sqrt(sq[i] + best + eps * eps) + eps)
                scale[i] = k
                nmax[i] = best
                ties[i] = count
            t_i = t[i]
            m = (s[col[start]] + t_i) * k
            m = m if m > zero else m * slope
            for e in range(start, stop):
                u = (s[col[e]] + t_i) * k
                u = u if u > zero else u * slope
                alpha[e] = u
                m = max(m, u)
            for e in range(start, stop):
                alpha[e] -= m

    @_jit_inline_div
    def _one_head_aggregate_row(i, rowptr, col, alpha, drop, dropped, weights, z, acc, one):  # pragma: no cover
        # acc [C] += Σ_e w_e z_j over row i's edges. alpha [E] holds exp(shifted scores) on entry and the softmax
        # weights on exit (PyG's softmax, 1e-16 guard); with ``dropped`` weights [E] = alpha · drop (the factors
        # m / (1 - p)), else weights is alpha. One visit per row: the row's sum, its normalisation, the drop factor
        # and the aggregation while the row's weights are in cache.
        start, stop = rowptr[i], rowptr[i + 1]
        total = one - one
        for e in range(start, stop):
            total += alpha[e]
        r = one / (total + np.float32(1e-16))
        width = z.shape[1]
        for e in range(start, stop):
            a = alpha[e] * r
            alpha[e] = a
            w = a * drop[e] if dropped else a
            weights[e] = w
            j = col[e]
            for c in range(width):
                acc[c] += w * z[j, c]

    @_jit_fast_div
    def one_head_aggregate(rowptr, col, alpha, drop, dropped, weights, z, bias, out, one):  # pragma: no cover
        # out[i] = b + Σ_e w_e z_j (_one_head_aggregate_row)
        n, width = z.shape
        acc = np.empty(width, z.dtype)
        for i in range(n):
            for c in range(width):
                acc[c] = bias[c]
            _one_head_aggregate_row(i, rowptr, col, alpha, drop, dropped, weights, z, acc, one)
            for c in range(width):
                out[i, c] = acc[c]

    @_jit_fast_div
    def one_head_aggregate_elu(rowptr, col, alpha, drop, dropped, weights, z, bias, out, elu_alpha,
                               one):  # pragma: no cover
        # out[i] = ELU(b + Σ_e w_e z_j) (float32: kernels' polynomial exponential)
        n, width = z.shape
        acc = np.empty(width, np.float32)
        h, poly, bits, pow2 = _elu_row_scratch(width)
        for i in range(n):
            acc[:] = 0
            _one_head_aggregate_row(i, rowptr, col, alpha, drop, dropped, weights, z, acc, one)
            _bias_elu_row(acc, bias, out[i], elu_alpha, one, h, poly, bits, pow2)

    @_jit_fast_div
    def one_head_score_backward(grad, z, alpha, weights, drop, dropped, rowptr, col, slope, node, lip, att_norm,
                                lip_alpha, eps, grad_z, grad_node, grad_att_norm, grad_bias, with_bias, delta, zero,
                                one):  # pragma: no cover
        # grad [N, C] (∂o), z [N, C], alpha [E] (undropped weights), weights [E] (the weights the aggregation used),
        # drop [E] (m / (1 - p), read with ``dropped``); grad_z [N, C] (zeroed): accumulates the aggregation's
        # ∂z_j += w_ij g_i; grad_node [3, N] (zeroed): accumulates ∂s, ∂t, ∂sq; grad_att_norm [1]: ∂‖a‖;
        # with ``with_bias`` grad_bias [C] (float64, zeroed): the column sums of grad, row by row as each g_i is read;
        # delta [max degree] scratch. Per edge one visit of the rows g_i and z_j forms δ_ij = g_i·z_j (times the
        # drop factor) and scatters w_ij g_i into ∂z_j; then the row's softmax, LeakyReLU and eq. (17) backward
        # while g_i and its δ are in cache. The serial loop makes the scatter race-free.
        n, width = z.shape
        two = one + one
        s, t, sq, scale, nmax, ties = node[0], node[1], node[2], node[3], node[4], node[5]
        grad_s, grad_t, grad_sq = grad_node[0], grad_node[1], grad_node[2]
        norm = att_norm[0]
        total_norm = zero
        for i in range(n):
            start, stop = rowptr[i], rowptr[i + 1]
            if with_bias:
                for c in range(width):
                    grad_bias[c] += grad[i, c]
            if start == stop:
                continue
            weighted = zero
            for e in range(start, stop):
                j = col[e]
                d = zero
                w = weights[e]
                for c in range(width):
                    g = grad[i, c]
                    d += g * z[j, c]
                    grad_z[j, c] += w * g
                if dropped:
                    d *= drop[e]
                delta[e - start] = d
                weighted += alpha[e] * d
            t_i = t[i]
            k_i = scale[i] if lip else one
            grad_k = zero
            grad_ti = zero
            for e in range(start, stop):
                j = col[e]
                p = s[j] + t_i
                de = alpha[e] * (delta[e - start] - weighted)
                de = de if p > zero else de * slope  # the sign of p · k_i is p's
                grad_k += de * p
                de *= k_i
                grad_s[j] += de
                grad_ti += de
            grad_t[i] += grad_ti
            if lip:
                # k = α / c: ∂c = -∂k · k² / α; c = ‖a‖ R + eps, R = sqrt(‖z_i‖² + M_i + eps²)
                r_i = np.sqrt(sq[i] + nmax[i] + eps * eps)
                grad_c = -grad_k * k_i * k_i / lip_alpha
                total_norm += grad_c * r_i
                grad_q = grad_c * norm / (two * r_i)
                grad_sq[i] += grad_q
                share = grad_q / ties[i]  # the maximum's gradient, split among tied sources
                best = nmax[i]
                for e in range(start, stop):
                    j = col[e]
                    if sq[j] == best:
                        grad_sq[j] += share
        grad_att_norm[0] = total_norm

    @_jit_fast_div
    def one_head_node_backward(grad_z, z, att_src, att_dst, grad_node, lip, att_norm, grad_att_norm, grad_att_src,
                               grad_att_dst, zero, one):  # pragma: no cover
        # Adds ∂s a_src + ∂t a_dst + 2 ∂sq z to grad_z [N, C] in place; writes the attention vectors' gradients [C]
        # (with eq. (17) also through ‖a‖ = sqrt(‖a_src‖² + ‖a_dst‖² + eps²): ∂‖a‖/∂a = a / ‖a‖).
        # score_kernels.gat_node_terms_backward computes the same terms for any number of heads, but its [N, H, C]
        # loop took 0.45–0.70 ms here against this one's 0.30–0.40 ms (PubMed, 64 channels, one thread,
        # alternating repeats; also with local sums or hoisted branches in it), so one head keeps its own.
        n, width = z.shape
        two = one + one
        grad_s, grad_t, grad_sq = grad_node[0], grad_node[1], grad_node[2]
        acc_src = np.zeros(width, z.dtype)
        acc_dst = np.zeros(width, z.dtype)
        for v in range(n):
            gs = grad_s[v]
            gt = grad_t[v]
            gq = two * grad_sq[v]
            for c in range(width):
                zc = z[v, c]
                grad_z[v, c] += gs * att_src[c] + gt * att_dst[c] + gq * zc
                acc_src[c] += gs * zc
                acc_dst[c] += gt * zc
        f = grad_att_norm[0] / att_norm[0] if lip else zero
        for c in range(width):
            grad_att_src[c] = acc_src[c] + f * att_src[c]
            grad_att_dst[c] = acc_dst[c] + f * att_dst[c]
