#!/usr/bin/env python3
"""Is a refactor's machine code unchanged? Compares the .text section of every kernel in NEW
cubins with the kernel of the same name in OLD (names normalised: the per-file tag nvcc gives an
anonymous namespace is dropped, so builds from different source paths compare). Exit 0 when
every NEW kernel is found in OLD with identical bytes, 1 otherwise.

    nvcc <the unit's flags> -arch=sm_90a -cubin -o old.cubin old_unit.cu    # at the base commit
    nvcc <the unit's flags> -arch=sm_90a -cubin -o new1.cubin new_unit1.cu  # at the change
    python3 scripts/cubin_text_diff.py old.cubin new1.cubin [new2.cubin ...]
"""
import hashlib
import re
import struct
import sys
def drop_anon(n):
    """n with every length-prefixed anonymous-namespace name (<len>_GLOBAL__N__<tag>) as ANON;
    the length is read from the digits before it (the shortest suffix that names a whole tag)."""
    while True:
        i = n.find('_GLOBAL__N__')
        if i < 0:
            return n
        j = i
        while j > 0 and n[j - 1].isdigit():
            j -= 1
        for k in range(1, i - j + 1):
            ident = n[i:i + int(n[i - k:i])]
            if re.fullmatch(r'_GLOBAL__N__[0-9a-f]{8}_[0-9]+_\w+_[0-9a-f]{8}(_[0-9]+)?', ident):
                n = n[:i - k] + 'ANON' + n[i + len(ident):]
                break
        else:
            return n
def texts(path):
    """{normalised kernel name: sha1 of its .text} of an ELF64 cubin."""
    b = open(path,'rb').read()
    # ELF64 little endian
    shoff = struct.unpack_from('<Q', b, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', b, 0x3A)
    secs=[]
    for i in range(shnum):
        off = shoff + i*shentsize
        name, typ, flags, addr, offset, size = struct.unpack_from('<IIQQQQ', b, off)
        secs.append((name, offset, size))
    stroff = secs[shstrndx][1]
    out={}
    for name, offset, size in secs:
        n = b[stroff+name: b.index(b'\0', stroff+name)].decode()
        if n.startswith('.text.'):
            key = re.sub(r'cuda_launch[0-9]+_GLOBAL__N__[0-9A-Za-z_]+?_[0-9a-f]{8}_[0-9]+', 'cuda_launchANON', n[6:])
            key = re.sub(r'_INTERNAL_[0-9a-f_]+', 'INT', key)
            key = drop_anon(key)
            out[key] = hashlib.sha1(b[offset:offset+size]).hexdigest()
    return out
def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    old = texts(sys.argv[1])
    same = diff = missing = 0
    for p in sys.argv[2:]:
        for k, h in texts(p).items():
            if k not in old: missing += 1; print('not in old:', p, k[:120])
            elif old[k] == h: same += 1
            else: diff += 1; print('differs:', p, k[:120])
    print(f'{same} kernels identical, {diff} differ, {missing} not found; old has {len(old)}')
    sys.exit(0 if diff == 0 and missing == 0 and same > 0 else 1)


if __name__ == '__main__':
    main()
