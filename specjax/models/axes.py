"""The axis legend: every shape comment in specjax uses these letters.

B  batch rows
T  query length (tokens fed in this forward call)
S  cache length (slots per row, a static bucket)
D  model (residual) dimension
N  query heads
K  key/value heads (grouped-query attention: N = K * G)
G  query heads per kv head
H  head dimension
V  vocabulary
F  feed-forward (MLP) dimension
L  layers
P  draft nodes in one speculative block (a chain or a tree)
M  accepted-path length (Dmax + 1: the drafts on the path plus the bonus token)

Padding. Rows are right-padded: row b's real tokens sit at slots 0..lengths[b]-1 of the
cache and at positions 0..len-1 of a prompt buffer; everything after is padding. Padding is
never masked by value, only by index: a query sees cache slot s iff s < lengths[b], or s lies
in the block being written now and is the query itself or one of its ancestors. Stale or
padded slots can therefore hold anything (even NaN) without changing a result.
"""
