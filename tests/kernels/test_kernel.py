"""The few-row CPU kernel: values against a float64 product, layouts, dispatch, fallback.

The kernel accumulates in float32 in k order, so it is compared with a float64 numpy product
at a tolerance set by XLA's own float32 error on the same input (a kernel that dropped a
panel, a row or a k step misses it by orders of magnitude).
"""

import logging
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from specjax import kernels
from specjax.kernels import build, layout

SHAPES = [(37, 50), (64, 16), (200, 33), (8, 1), (96, 130)]  # K and N off the 16-wide tile


def _rel_err(y, ref):
    return float(np.max(np.abs(np.asarray(y, np.float64) - ref)) / np.max(np.abs(ref)))


@pytest.mark.parametrize("K,N", SHAPES)
def test_kernel_matches_float64_for_every_row_count(K, N, rng):
    w = rng.standard_normal((K, N)).astype(np.float32)
    pw = kernels.pack(w)
    f = jax.jit(kernels.matmul)
    for T in range(1, 33):
        x = rng.standard_normal((T, K)).astype(np.float32)
        ref = x.astype(np.float64) @ w.astype(np.float64)
        xla_err = _rel_err(x @ w, ref)
        err = _rel_err(f(x, pw), ref)
        assert err <= max(4 * xla_err, 1e-6), (T, K, N, err, xla_err)


@pytest.mark.parametrize("wide_rows", [0, 64])
@pytest.mark.parametrize("N", [130, 120])
def test_either_tiling_matches_float64(wide_rows, N, rng, monkeypatch):
    """The tiling is the call's attribute (`kernels.WIDE_ROWS`): narrow tiles for every row
    count (0), and the wider ones (4 panels in passes, 3 panels at 7-8 rows on AVX-512) for
    every row count (64), on the build here and on the AVX2 build, against float64. N = 130
    is 9 panels (the last 2 columns wide), 120 is 8 (8 columns): groups of 3 and 4 panels
    with and without single panels left over."""
    monkeypatch.setattr(kernels, "WIDE_ROWS", wide_rows)
    K = 96
    w = rng.standard_normal((2, K, N)).astype(np.float32)
    pw = kernels.pack(w)
    for march in ("native", "haswell"):
        assert build.load(march) is not None
        f = jax.jit(lambda a, b, m=march: kernels._kernel(a, b, march=m))  # traced here, now
        for T in (1, 2, 5, 6, 7, 8, 9, 12, 13, 17, 32):
            x = rng.standard_normal((2, T, K)).astype(np.float32)
            ref = np.einsum("gtk,gkn->gtn", x.astype(np.float64), w.astype(np.float64))
            assert _rel_err(f(x, pw), ref) < 1e-5, (march, T)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_avx2_tiles_built_for_haswell(dtype, rng):
    """The tiles an AVX2-only CPU compiles (up to 6 rows x 1 panel), run here from a haswell build."""
    assert build.load("haswell") is not None
    K, N = 70, 45
    w = jnp.asarray(rng.standard_normal((3, K, N)), dtype)
    pw = kernels.pack(w)
    for T in (1, 3, 4, 5, 6, 7, 9, 13, 32):  # one pass of each height, then balanced passes
        x = rng.standard_normal((3, T, K)).astype(np.float32)
        y = jax.jit(lambda a, b: kernels._kernel(a, b, march="haswell"))(x, pw)
        ref = np.einsum(
            "gtk,gkn->gtn", x.astype(np.float64), np.asarray(w.astype(jnp.float32), np.float64)
        )
        assert _rel_err(y, ref) < 1e-5, T


def test_kernel_is_in_the_program_up_to_the_crossover_only(rng):
    w = kernels.pack(rng.standard_normal((24, 40)).astype(np.float32))
    small = jax.jit(kernels.matmul).lower(jnp.zeros((3, 24)), w).as_text()
    big = jnp.zeros((kernels.MAX_KERNEL_ROWS + 1, 24))
    assert "specjax_packed_matmul" in small
    assert "specjax_packed_matmul" not in jax.jit(kernels.matmul).lower(big, w).as_text()
    x = rng.standard_normal((kernels.MAX_KERNEL_ROWS + 1, 24)).astype(np.float32)
    # XLA's GEMM sums in its own order: float32 error relative to the terms (|y| up to ~10).
    np.testing.assert_allclose(kernels.matmul(x, w), x @ kernels.unpack(w), rtol=1e-5, atol=1e-5)


def test_nan_and_inf_propagate_as_in_xla(rng):
    K, N = 40, 35
    x = rng.standard_normal((5, K)).astype(np.float32)
    w = rng.standard_normal((K, N)).astype(np.float32)
    x[1, 7] = np.nan
    w[3, 20] = np.inf
    w[5, 34] = -np.inf  # in the tail panel
    y = np.asarray(jax.jit(kernels.matmul)(x, kernels.pack(w)))
    ref = x @ w
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(y), np.isposinf(ref))
    np.testing.assert_array_equal(np.isneginf(y), np.isneginf(ref))
    assert np.isnan(y[1]).all() and np.isinf(y[0, 20]) and np.isinf(y[2, 34])


def test_inside_scan_and_while_loop(rng):
    w = rng.standard_normal((48, 48)).astype(np.float32) / 7
    pw = kernels.pack(w)
    x0 = rng.standard_normal((4, 48)).astype(np.float32)

    def body(x, _):
        return jnp.tanh(kernels.matmul(x, pw)), None

    def ref_body(x, _):
        return jnp.tanh(x @ w), None

    scanned = jax.jit(lambda x: jax.lax.scan(body, x, None, length=6)[0])(x0)
    looped = jax.jit(
        lambda x: jax.lax.while_loop(
            lambda c: c[0] < 6, lambda c: (c[0] + 1, body(c[1], None)[0]), (0, x)
        )[1]
    )(x0)
    ref = jax.lax.scan(ref_body, x0, None, length=6)[0]
    np.testing.assert_allclose(scanned, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(scanned, looped)


def test_per_group_product_and_layers(rng):
    G, K, N = 3, 40, 70
    x = rng.standard_normal((2, 5, G, K)).astype(np.float32)
    w = rng.standard_normal((G, 2, K, N)).astype(np.float32)
    stack = kernels.pack_layers(w)
    for i in range(2):
        y = jax.jit(kernels.per_group_matmul)(x, kernels.layer(stack, i))
        ref = np.einsum("abgk,gkn->abgn", x.astype(np.float64), w[:, i].astype(np.float64))
        assert _rel_err(y, ref) < 1e-5
    np.testing.assert_array_equal(kernels.unpack(stack), w)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_per_group_product_reads_the_first_groups(dtype, rng, monkeypatch):
    # x with 2 groups against a stack of 4: the kernel reads the first two matrices in place,
    # XLA's fallback slices them; both as a 2-matrix stack would give.
    x = rng.standard_normal((3, 2, 40)).astype(np.float32)
    w = rng.standard_normal((4, 40, 70)).astype(np.float32)
    stack = kernels.round_weight(kernels.pack(w), None if dtype == "float32" else dtype)
    first = np.asarray(kernels.unpack(stack), np.float64)[:2]  # the weights as rounded
    ref = np.einsum("bgk,gkn->bgn", x.astype(np.float64), first)
    y = jax.jit(kernels.per_group_matmul)(x, stack)
    assert y.shape == (3, 2, 70) and _rel_err(y, ref) < 1e-5
    monkeypatch.setenv(kernels.ENV, "0")
    assert _rel_err(jax.jit(kernels.per_group_matmul)(x, stack), ref) < 1e-5
    with pytest.raises(ValueError, match="x has 5 groups"):
        kernels.per_group_matmul(np.zeros((1, 5, 40), np.float32), stack)


def test_table_layout_serves_lookups_and_the_lm_head(rng):
    E = rng.standard_normal((100, 24)).astype(np.float32)  # [V, D], V off the tile
    pe = kernels.pack(E, table=True)
    tokens = jnp.array([[0, 5, 99], [17, 16, 15]])
    np.testing.assert_array_equal(kernels.embed_lookup(pe, tokens), E[np.asarray(tokens)])
    x = rng.standard_normal((4, 24)).astype(np.float32)
    np.testing.assert_allclose(jax.jit(kernels.matmul)(x, pe), x @ E.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(kernels.unpack(pe), E)
    assert pe.panels.size == 7 * 16 * 24  # one copy, padded to 112 rows: no second table


def test_bfloat16_table_rows_read_in_a_loop_without_a_copy_of_the_table(rng):
    """A packed bfloat16 table's rows come from the kernel, widened to float32, inside a
    decode-like loop. XLA's own gather of bfloat16 runs in float32: it widened the whole table
    and hoisted that out of the loop (an op making an array of the table's shape is the sign)."""
    E = rng.standard_normal((100, 24)).astype(np.float32)  # V off the tile: padded lanes
    table = kernels.round_weight(kernels.pack(E, table=True), "bfloat16")
    rounded = np.asarray(jnp.asarray(E, jnp.bfloat16).astype(jnp.float32))
    tokens = jnp.array([[0, 5, 99], [17, 16, 15]])
    rows = kernels.embed_lookup(table, tokens)
    assert rows.dtype == jnp.float32
    np.testing.assert_array_equal(rows, rounded[np.asarray(tokens)])

    def loop(t, token):
        def step(_, carry):
            tok, acc = carry
            row = kernels.embed_lookup(t, tok).astype(jnp.float32)
            return jnp.argmax(row, -1).astype(jnp.int32) * 7 % 100, acc + row

        return jax.lax.fori_loop(0, 4, step, (token, jnp.zeros((1, 24), jnp.float32)))[1]

    token = jnp.array([3])
    want, tok = np.zeros((1, 24), np.float32), 3
    for _ in range(4):
        want += rounded[tok]
        tok = int(np.argmax(rounded[tok])) * 7 % 100
    looped = jax.jit(loop)
    np.testing.assert_array_equal(looped(table, token), want)
    shape = ",".join(map(str, table.panels.shape))
    made = re.findall(
        rf"= \w+\[{shape}\]\S* (\S+)\(", looped.lower(table, token).compile().as_text()
    )
    assert set(made) <= {"parameter", "get-tuple-element", "tuple"}, made


@pytest.mark.parametrize("K", [7, 24])
def test_bfloat16_panels_pair_their_rows(K, rng, monkeypatch):
    """bfloat16 panels interleave each pair of k-rows column by column (the kernel widens a
    pair with a shift and a mask); an odd K's last row stays as it is. Products on the native
    and the AVX2 build, the table's rows through the kernel and through XLA's gather, and the
    standard layout back, all exact or against float64."""
    w = jnp.asarray(rng.standard_normal((2, K, 37)), jnp.bfloat16)
    pw = kernels.pack(w)
    panel = np.asarray(pw.panels[0, 0].astype(jnp.float32))  # [K, 16], the first panel
    wf = np.asarray(w[0].astype(jnp.float32))
    assert panel[0, 0] == wf[0, 0] and panel[0, 1] == wf[1, 0] and panel[0, 2] == wf[0, 1]
    assert panel[1, 0] == wf[0, 8] and panel[1, 1] == wf[1, 8]
    if K % 2:
        np.testing.assert_array_equal(panel[K - 1], wf[K - 1, :16])
    np.testing.assert_array_equal(kernels.unpack(pw), w)
    ref_w = np.asarray(w.astype(jnp.float32), np.float64)
    for march in ("native", "haswell"):
        assert build.load(march) is not None
        f = jax.jit(lambda a, b, m=march: kernels._kernel(a, b, march=m))
        for T in (1, 3, 8, 13):
            x = rng.standard_normal((2, T, K)).astype(np.float32)
            ref = np.einsum("gtk,gkn->gtn", x.astype(np.float64), ref_w)
            assert _rel_err(f(x, pw), ref) < 1e-5, (march, T)
    E = rng.standard_normal((50, K)).astype(np.float32)
    table = kernels.round_weight(kernels.pack(E, table=True), "bfloat16")
    rounded = np.asarray(jnp.asarray(E, jnp.bfloat16).astype(jnp.float32))
    tokens = jnp.array([[0, 9, 49], [17, 16, 8]])
    np.testing.assert_array_equal(kernels.embed_lookup(table, tokens), rounded[np.asarray(tokens)])
    monkeypatch.setenv(kernels.ENV, "0")  # XLA's gather over the paired panels
    np.testing.assert_array_equal(kernels.embed_lookup(table, tokens), rounded[np.asarray(tokens)])
    np.testing.assert_array_equal(kernels.unpack(table), rounded)


def test_bfloat16_weights_accumulate_in_float32(rng):
    w = jnp.asarray(rng.standard_normal((64, 48)), jnp.bfloat16)
    x = rng.standard_normal((5, 64)).astype(np.float32)
    y = jax.jit(kernels.matmul)(x, kernels.pack(w))
    ref = x.astype(np.float64) @ np.asarray(w.astype(jnp.float32), np.float64)
    assert y.dtype == jnp.float32 and _rel_err(y, ref) < 1e-5


def test_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setenv(kernels.ENV, "0")
    assert not kernels.available()
    module = nnx.Linear(4, 4, rngs=nnx.Rngs(0))  # nothing declared: never packed either
    assert layout.packed_paths(module) == {}


def test_no_compiler_warns_once_and_falls_back(monkeypatch, caplog):
    build._load.cache_clear()
    monkeypatch.setattr(build, "_compiler", lambda: None)
    try:
        with caplog.at_level(logging.WARNING, logger=build.__name__):
            assert not kernels.available()
            assert not kernels.available()
        warnings = [r for r in caplog.records if "no C++ compiler" in r.getMessage()]
        assert len(warnings) == 1
    finally:
        build._load.cache_clear()
        monkeypatch.undo()
    assert kernels.available()  # the cached library loads again


def test_library_key_follows_source_and_cpu(monkeypatch):
    compiler = build._compiler()
    key = build.library_key(compiler)
    assert key == build.library_key(compiler)
    model, _ = build._cpuinfo()
    monkeypatch.setattr(build, "_cpuinfo", lambda: (model, ("avx2", "fma")))
    assert build.library_key(compiler) != key
    cpu = build.cpu_description()
    assert cpu["model"] and "L2" in cpu["caches"] and cpu["cores"] >= 1


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_many_products_in_one_call_equal_one_each(dtype, rng):
    """q/k/v-like products of one x (N off the tile, one weight K x 1) in one kernel call give
    each product's own result, bitwise, at row counts on both tile widths and above them."""
    K = 70
    ws = [kernels.pack(jnp.asarray(rng.standard_normal((K, n)), dtype)) for n in (48, 33, 1)]
    many = jax.jit(kernels.matmul_many)
    for T in (1, 3, 5, 6, 17):
        x = jnp.asarray(rng.standard_normal((2, T, K)), jnp.float32)
        got = many(x, ws)
        assert "specjax_packed_matmul_many" in many.lower(x, ws).as_text()
        for y, w in zip(got, ws, strict=True):
            np.testing.assert_array_equal(y, kernels.matmul(x, w))
            ref = np.asarray(x, np.float64) @ np.asarray(kernels.unpack(w).astype(jnp.float32))
            assert _rel_err(y, ref) < 1e-5
    # A NaN row stays in its own rows of every product.
    x = np.asarray(rng.standard_normal((1, 4, K)), np.float32)
    x[0, 2, 5] = np.nan
    for y in many(x, ws):
        bad = np.isnan(np.asarray(y)).any(axis=-1)[0]
        assert bad.tolist() == [False, False, True, False]


def test_many_products_fall_back_where_the_kernel_does_not_take_them(rng, monkeypatch):
    K = 24
    w_std = jnp.asarray(rng.standard_normal((K, 16)), jnp.float32)
    w_packed = kernels.pack(jnp.asarray(rng.standard_normal((K, 8)), jnp.float32))
    x = jnp.asarray(rng.standard_normal((3, K)), jnp.float32)
    mixed = jax.jit(kernels.matmul_many).lower(x, [w_std, w_packed]).as_text()
    assert "specjax_packed_matmul_many" not in mixed  # a standard weight: one product each
    y_std, y_packed = kernels.matmul_many(x, [w_std, w_packed])
    np.testing.assert_array_equal(y_std, x @ w_std)
    np.testing.assert_array_equal(y_packed, kernels.matmul(x, w_packed))
    monkeypatch.setenv(kernels.ENV, "0")  # switched off: XLA's dot over the panels
    off = jax.jit(kernels.matmul_many).lower(x, [w_packed, w_packed]).as_text()
    assert "specjax_packed_matmul" not in off
    np.testing.assert_allclose(
        kernels.matmul_many(x, [w_packed])[0], x @ kernels.unpack(w_packed), rtol=1e-5, atol=1e-6
    )
