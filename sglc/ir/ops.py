"""The op enum of the sglc IR, grouped by what the ops do, and the property sets passes use.

Each op's inputs, attributes and output are documented on :class:`sglc.ir.node.Node`.
"""
from __future__ import annotations

import enum


class Op(enum.Enum):
    # --- values that come from outside the graph ---
    ARGUMENT = "argument"  # a program argument, bound per run

    # --- text appended to a stream (intra-stream order) ---
    CONSTANT_TEXT = "constant_text"  # append a literal string
    APPEND = "append"  # append the string form of a value (argument, variable, gen result)
    ROLE_BEGIN = "role_begin"  # open a chat role (system/user/assistant); text from the chat template
    ROLE_END = "role_end"  # close the chat role opened last
    IMAGE = "image"  # append an image (path or URL)
    VIDEO = "video"  # append a video (path or URL, num_frames)

    # --- model calls ---
    GEN = "gen"  # generate text into a named variable
    SELECT = "select"  # choose one of fixed choices by likelihood, into a named variable

    # --- values computed from other values (pure) ---
    FORMAT = "format"  # text made of constant pieces and input values (f-strings, str.format, %)
    GET_ITEM = "get_item"  # value[key]: an item of a list argument, a field of a dict item
    LENGTH = "length"  # len(value)

    # --- loops over a list known at run time (the body is the stream's nodes between them) ---
    LOOP_BEGIN = "loop_begin"  # iterate a list (or range(n)); outputs the current item
    LOOP_INDEX = "loop_index"  # the current iteration's index (+ start), as enumerate gives it
    LOOP_END = "loop_end"  # end of the body; outputs the variables the body set, as they end

    # --- reading results ---
    VARIABLE = "variable"  # read a named result produced by another node (often another stream)
    STREAM_TEXT = "stream_text"  # the text of this stream so far (s.text())
    VAR_SCOPE_BEGIN = "var_scope_begin"  # start capturing appended text into a variable
    VAR_SCOPE_END = "var_scope_end"  # end capturing; its value is the captured text

    # --- streams ---
    FORK = "fork"  # create N child streams that start with this stream's text
    GET_FORK_ITEM = "get_fork_item"  # the first node of child stream i of a fork
    JOIN = "join"  # wait for a fork's children and bring their results back

    # --- control flow and hints ---
    BRANCH = "branch"  # switch on a select result; nodes of each case carry a guard
    CACHE_PREFIX = "cache_prefix"  # hint: prefill and keep this stream's text so far

    # --- the program's result ---
    OUTPUT = "output"  # what the function returns (state.ret_value), built from its inputs


#: Ops that append text to their stream (and so must run in stream order).
TEXT_OPS = frozenset({Op.CONSTANT_TEXT, Op.APPEND, Op.ROLE_BEGIN, Op.ROLE_END, Op.IMAGE, Op.VIDEO})

#: Ops that call the model.
SAMPLING_OPS = frozenset({Op.GEN, Op.SELECT})

#: Ops whose `name` attribute defines a readable variable of the stream.
VARIABLE_PRODUCING_OPS = frozenset({Op.GEN, Op.SELECT, Op.VAR_SCOPE_END})

#: Ops that create or finish streams.
STREAM_OPS = frozenset({Op.FORK, Op.GET_FORK_ITEM, Op.JOIN})

#: Ops that open and close a loop body (a region of one stream, run once per item).
LOOP_OPS = frozenset({Op.LOOP_BEGIN, Op.LOOP_END})

#: Ops that sit outside any stream's text order (pure values).
VALUE_OPS = frozenset({Op.ARGUMENT, Op.VARIABLE})

#: Chat roles accepted by ROLE_BEGIN / ROLE_END.
ROLES = ("system", "user", "assistant")
