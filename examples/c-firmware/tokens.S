/* The text to score, one token id per byte: exported/tokens.bin, in flash. */
    .section .rodata.tokens, "a"
    .global tokens
    .global tokens_end
tokens:
    .incbin "exported/tokens.bin"
tokens_end:
