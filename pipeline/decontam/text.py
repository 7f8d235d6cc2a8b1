"""Text leaks: which left ("train") records copy the text of a right ("eval") record.

The same function serves eval against eval (one item in two benchmarks): "train" and "eval" only
name the two sides; coverage is always measured on the right text. No dataset is named here.

Method

1. Normalise (`normalise`, polars expressions over the whole column): Unicode NFKC (full-width
   letters and digits become ASCII), lower case, wrapper text removed (InternVL's `### Question:`
   frame with anything before it and its `### Solution Process:` tail, `<image>` tokens,
   MathVista's `Hint: ...` lead up to its `Question:` label, `Question:` / `Choices:` /
   `Options:` labels), apostrophes dropped (curly or straight, so "option's" is "options"), every
   other run of characters that are not letters, digits or marks becomes one space (so quotes,
   punctuation and line wraps vanish, and `A:`, `A.`, `(A)`, `A)` all become the word `a`, exactly
   as the article in "A triangle" stays `a`), then stock instructions (`BOILERPLATE`) are cut out
   of the word sequence.
2. Words and n-grams: a normalised text is its words split on single spaces. Words are hashed to
   uint64; the hash of the n-gram starting at word i is  sum_k hash(word_{i+k}) * C_k  (wrapping
   uint64 arithmetic, C_k fixed odd constants), computed with column shifts over all the words of
   a batch; an n-gram is kept only when its last word belongs to the same text as its first, so
   no n-gram spans two texts.
3. Stock text is not a leak: an n-gram found in at least `stock_records` distinct records (left
   and right counted together) is ignored, and so is a whole text found that often ("Describe this
   image in detail."). Only n-grams that occur on the right can match, so only those are counted
   on the left.
4. Pairs: a left and a right text are candidates when they share non-stock n-grams. For each pair,
   the right text's matched n-gram starts j give the covered words (union of [j, j + n));
   `text_overlap` = covered words / right words, and the longest run of consecutive matched starts
   gives `longest_span` (run + n - 1 words) and `matched_text`. Equal normalised texts are a
   whole-text match (`exact`, overlap 1.0) unless the whole text is stock; texts shorter than n
   words can match only that way.
5. Kept: overlap >= `min_overlap`, and per left record only the right records within
   `sibling_margin` of its best overlap. Numbers and choice letters are words, so a template
   sibling (the same problem with other numbers or labels) covers less of the right text than the
   real source does, and is dropped when the source is there.

All of it is set-wise (polars frames, joins, group-bys). Identical normalised texts are processed
once (a record is its text's hash) and fanned out to their records at the end. The left side is
cut into batches of `BATCH_TEXTS` texts; the stock counts need the whole left side, so the
n-grams of a batch are first reduced to those found on the right (small), counted, and only then
joined into pairs. The pair join is bounded by the stock rule: an n-gram that is not stock sits in
fewer than `stock_records` records, so it yields fewer than stock_records^2 / 4 pairs.

Settings (`TextMatchSettings`; the defaults are chosen on the tuning half of
tests/benchmarks/bench_text_leaks.py, figures at the class).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
import pyarrow as pa

RECORD_TEXT_SCHEMA = pa.schema([("dataset", pa.string()), ("key", pa.string()), ("text", pa.string())])

TEXT_LEAK_SCHEMA = pa.schema([
    ("train_dataset", pa.string()), ("train_key", pa.string()),
    ("eval_dataset", pa.string()), ("eval_key", pa.string()),
    ("text_overlap", pa.float32()),  # share of the eval text's normalised words covered by matched non-stock n-grams
    ("longest_span", pa.int32()),  # words in the longest run of the eval text matched contiguously
    ("matched_text", pa.string()),  # that run: the eval text's normalised words joined by spaces
    ("exact", pa.bool_()),  # the two normalised texts are equal
])


@dataclass(frozen=True)
class TextMatchSettings:
    # Chosen on the tuning half of tests/benchmarks/bench_text_leaks.py (see its output).
    ngram: int = 8
    min_overlap: float = 0.8
    stock_records: int = 30
    sibling_margin: float = 0.1


# Left texts per batch: bounds the exploded word frame (~65 words a text, 16 bytes a word).
BATCH_TEXTS = 100_000

# Wrapper text, removed before punctuation goes (the labels need their colons). Applied to the
# NFKC, lower-cased text in two passes, because the second pass's line anchors must see the text
# after the frame is gone.
_FRAME = "|".join([
    r"(?s:^.*?###\s*question\s*:)",  # InternVL: "### Question:" and whatever precedes it (system prompt)
    r"(?s:###\s*solution process\s*:.*$)",  # InternVL: the solution tail
    r"<\s*(?:image|img)[\s_]*\d*\s*>",  # <image>, <image 1>, <image_2>
])
_LABELS = "|".join([
    r"(?m:^)[ \t]*hint\s*:(?s:.{0,400}?)\bquestion\s*:",  # MathVista: "Hint: ..." up to its "Question:"
    r"(?m:^)[ \t]*(?:question|q)\s*:",  # a "Question:" label at a line start
    r"\b(?:choices|options)\s*:",  # the label before the choices
])
_APOSTROPHES = ["'", "\u2018", "\u2019", "\u201a", "\u201b", "\u2032", "\u00b4", "`"]

# Stock instructions, as word sequences of the normalised text ("e.g.," is "e g", "option's" is
# "options", "\boxed{}" is "boxed"). Cut wherever they occur.
BOILERPLATE = [
    r"answer the question using a single (?:word|number) or (?:a )?(?:short )?phrase",
    r"answer (?:the question )?with a (?:single word|short phrase|word or phrase)",
    r"please answer the question and provide the correct option letter e g a b c d at the end",
    # MathVista's other hints: "... requiring an integer answer and provide the final value, e.g., 1, 2, 3, at the end."
    r"please answer the question requiring [\w ]{1,80}? and provide the final (?:value|list) e g [\w ]{1,80}? at the end",
    r"answer with the options? letter from the given choices directly",
    r"first perform reasoning then finally select the question from the choices in the following format answer xxx",
    r"please select the correct answer from the options above",
    r"please reason step by step and put your final answer within boxed",
]


def _normalised(text: pl.Expr) -> pl.Expr:
    t = text.str.normalize("NFKC").str.to_lowercase()
    t = t.str.replace_all(_FRAME, " ").str.replace_all(_LABELS, " ")
    t = t.str.replace_many(_APOSTROPHES, [""] * len(_APOSTROPHES))
    # Punctuation, symbols, tabs and line breaks; a class without the plain space is 4x faster
    # than one with it (single spaces are most of the text), so runs of spaces are collapsed next.
    t = t.str.replace_all(r"[^\p{L}\p{N}\p{M} ]+", " ").str.replace_all(" {2,}", " ")
    t = t.str.replace_all(r"\b(?:" + "|".join(BOILERPLATE) + r")\b", " ")
    return t.str.replace_all(" {2,}", " ").str.strip_chars(" ")


def normalise(texts) -> pl.Series:
    """The normalised texts (see the module docstring); None stays None."""
    if isinstance(texts, (pa.Array, pa.ChunkedArray)):
        series = pl.Series("text", texts)
    elif isinstance(texts, pl.Series):
        series = texts.rename("text")
    else:
        series = pl.Series("text", list(texts), dtype=pl.String)
    return series.cast(pl.String).to_frame().select(_normalised(pl.col("text"))).to_series()


_SEED = 0x5EED
# Odd multipliers for the n-gram's word positions (splitmix64 outputs | 1).
_MULTIPLIERS = [
    0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB, 0xD6E8FEB86659FD93,
    0xA0761D6478BD642F, 0xE7037ED1A0B428DB, 0x8EBC6AF09C88C6E3, 0x589965CC75374CC3,
    0x1D8E4E27C47D124F, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
    0x27D4EB2F165667C5, 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, 0x2545F4914F6CDD1D,
]
MAX_NGRAM = len(_MULTIPLIERS)


def _records(table: pa.Table) -> pl.DataFrame:
    """dataset, key, thash (the normalised text's hash), norm, nwords; texts with no words dropped.
    The streaming engine runs the regex passes on both cores, a morsel at a time."""
    return (pl.from_arrow(table.select(["dataset", "key", "text"])).lazy()
            .select(pl.col("dataset", "key").cast(pl.String), norm=_normalised(pl.col("text").cast(pl.String)))
            .filter(pl.col("norm").is_not_null() & (pl.col("norm") != ""))
            .with_columns(thash=pl.col("norm").hash(_SEED),
                          nwords=(pl.col("norm").str.count_matches(" ", literal=True) + 1).cast(pl.UInt32))
            .collect(engine="streaming"))


def _distinct_texts(records: pl.DataFrame) -> pl.DataFrame:
    """thash, norm, nwords, mult (records with that text)."""
    return records.group_by("thash").agg(pl.col("norm", "nwords").first(), mult=pl.len().cast(pl.UInt32))


def _ngrams(texts: pl.DataFrame, n: int, positions: bool) -> pl.DataFrame:
    """thash, g (the n-gram's hash) and, with positions, j (its first word) of every n-gram of the
    texts (thash, norm, nwords; each thash once, every text at least n words)."""
    cols = [pl.col("thash"), pl.col("norm").str.split(" ").alias("word")]
    if positions:
        cols.append(pl.int_ranges(0, pl.col("nwords"), dtype=pl.UInt32).alias("j"))
    words = texts.select(cols).explode(["word", "j"] if positions else ["word"])
    h = pl.col("word").hash(_SEED)
    g = h * pl.lit(_MULTIPLIERS[0], pl.UInt64)
    for k in range(1, n):
        g = g + h.shift(-k) * pl.lit(_MULTIPLIERS[k], pl.UInt64)
    # Texts are contiguous and distinct, so the n-gram stays inside its text iff its last word's
    # text is its first word's.
    inside = pl.col("thash").shift(-(n - 1)) == pl.col("thash")
    return words.select(pl.col("thash"), *([pl.col("j")] if positions else []), g.alias("g"), inside.alias("inside")) \
        .filter(pl.col("inside")).drop("inside")


def _coverage(matches: pl.DataFrame, n: int) -> pl.DataFrame:
    """Per (lhash, rhash): covered right words, and the longest run of consecutive matched starts
    (start, span in words). `matches`: lhash, rhash, j, unique."""
    m = matches.sort("lhash", "rhash", "j")
    same_next = (pl.col("lhash").shift(-1) == pl.col("lhash")) & (pl.col("rhash").shift(-1) == pl.col("rhash"))
    same_prev = (pl.col("lhash").shift(1) == pl.col("lhash")) & (pl.col("rhash").shift(1) == pl.col("rhash"))
    gap = pl.when(same_next).then(pl.col("j").shift(-1) - pl.col("j")).otherwise(n)
    run_start = ~(same_prev & (pl.col("j").shift(1) == pl.col("j") - 1)).fill_null(False)
    m = m.with_columns(cover=pl.min_horizontal(gap, pl.lit(n, pl.UInt32)).cast(pl.UInt32),
                       run=run_start.cum_sum())
    cover = m.group_by("lhash", "rhash").agg(pl.col("cover").sum())
    runs = m.group_by("run").agg(pl.col("lhash", "rhash", "j").first(), length=pl.len())
    best_run = (runs.sort(["length", "j"], descending=[True, False])
                .unique(["lhash", "rhash"], keep="first")
                .select("lhash", "rhash", start=pl.col("j"), span=(pl.col("length") + (n - 1)).cast(pl.UInt32)))
    return cover.join(best_run, on=["lhash", "rhash"])


def _empty() -> pa.Table:
    return TEXT_LEAK_SCHEMA.empty_table()


def text_leaks(train: pa.Table, evals: pa.Table, settings: TextMatchSettings = TextMatchSettings()) -> pa.Table:
    """Train records that copy eval records' text, in TEXT_LEAK_SCHEMA, sorted by train_dataset,
    train_key, eval_dataset, eval_key. Both inputs are in RECORD_TEXT_SCHEMA."""
    n = settings.ngram
    if not 1 <= n <= MAX_NGRAM:
        raise ValueError(f"ngram must be 1..{MAX_NGRAM}, got {n}")
    if train.num_rows == 0 or evals.num_rows == 0:
        return _empty()
    right = _records(evals)
    left = _records(train)
    if right.is_empty() or left.is_empty():
        return _empty()
    r_texts = _distinct_texts(right)
    l_texts = _distinct_texts(left)
    right = right.select("dataset", "key", "thash")
    left = left.select("dataset", "key", "thash")

    # Whole-text matches: equal normalised texts, unless the text itself is stock.
    exact = (l_texts.select("thash", l_mult="mult")
             .join(r_texts.select("thash", "nwords", r_mult="mult"), on="thash")
             .filter(pl.col("l_mult").cast(pl.Int64) + pl.col("r_mult") < settings.stock_records)
             .select(lhash="thash", rhash="thash", cover="nwords", start=pl.lit(0, pl.UInt32), span="nwords"))

    # Right n-grams with their positions, and how many right records hold each.
    rg = _ngrams(r_texts.filter(pl.col("nwords") >= n), n, positions=True).rename({"thash": "rhash"})
    r_count = (rg.select("rhash", "g").unique()
               .join(r_texts.select(rhash="thash", mult="mult"), on="rhash")
               .group_by("g").agg(r_count=pl.col("mult").sum()))

    # Left n-grams, a batch of texts at a time, kept only where they occur on the right.
    long_left = l_texts.filter(pl.col("nwords") >= n).select("thash", "norm", "nwords", "mult")
    lg_batches = []
    for start in range(0, long_left.height, BATCH_TEXTS):
        batch = long_left.slice(start, BATCH_TEXTS)
        lg = _ngrams(batch, n, positions=False).join(r_count.select("g"), on="g", how="semi").unique()
        lg_batches.append(lg.join(batch.select("thash", "mult"), on="thash").rename({"thash": "lhash"}))
    l_count = (pl.concat(lg_batches).group_by("g").agg(l_count=pl.col("mult").sum())
               if lg_batches else pl.DataFrame(schema={"g": pl.UInt64, "l_count": pl.UInt32}))

    not_stock = (r_count.join(l_count, on="g", how="left")
                 .filter(pl.col("r_count").cast(pl.Int64) + pl.col("l_count").fill_null(0) < settings.stock_records)
                 .select("g"))
    rg = rg.join(not_stock, on="g", how="semi")

    candidates = [exact.with_columns(exact=pl.lit(True))]
    for lg in lg_batches:
        matches = lg.select("lhash", "g").join(rg, on="g").select("lhash", "rhash", "j").unique()
        pairs = _coverage(matches, n).join(r_texts.select(rhash="thash", nwords="nwords"), on="rhash")
        pairs = pairs.filter(pl.col("cover") >= settings.min_overlap * pl.col("nwords"))
        candidates.append(pairs.select("lhash", "rhash", "cover", "start", "span",
                                       exact=pl.col("lhash") == pl.col("rhash")))
        del matches
    lg_batches.clear()

    # A whole-text match wins over the n-gram figures of the same pair (stock n-grams lower those).
    pairs = (pl.concat([c.with_columns(pl.col("cover", "start", "span").cast(pl.UInt32)) for c in candidates])
             .unique(["lhash", "rhash"], keep="first", maintain_order=True)
             .join(r_texts.select(rhash="thash", nwords="nwords", norm="norm"), on="rhash")
             .with_columns(overlap=pl.when("exact").then(1.0).otherwise(pl.col("cover") / pl.col("nwords")))
             .filter(pl.col("overlap") >= settings.min_overlap))
    pairs = pairs.filter(pl.col("overlap") >= pl.col("overlap").max().over("lhash") - settings.sibling_margin)
    if pairs.is_empty():
        return _empty()
    pairs = pairs.select(
        "lhash", "rhash", "exact",
        text_overlap=pl.col("overlap").cast(pl.Float32),
        longest_span=pl.col("span").cast(pl.Int32),
        matched_text=pl.col("norm").str.split(" ").list.slice(pl.col("start"), pl.col("span")).list.join(" "),
    )
    out = (pairs
           .join(left.rename({"dataset": "train_dataset", "key": "train_key", "thash": "lhash"}), on="lhash")
           .join(right.rename({"dataset": "eval_dataset", "key": "eval_key", "thash": "rhash"}), on="rhash")
           .select(TEXT_LEAK_SCHEMA.names)
           .sort("train_dataset", "train_key", "eval_dataset", "eval_key"))
    return out.to_arrow().cast(TEXT_LEAK_SCHEMA)
