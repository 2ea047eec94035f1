package framing

// CRC-16/CCITT-FALSE: width 16, poly 0x1021, init 0xFFFF, refin false,
// refout false, xorout 0x0000, check ("123456789") 0x29B1.

// CRC16Init is the initial value of CRC-16/CCITT-FALSE, for use with
// UpdateCRC16.
const CRC16Init uint16 = 0xFFFF

// crcTable is the MSB-first table for polynomial 0x1021, built at init so the
// table cannot drift from the polynomial.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// CRC16 returns the CRC-16/CCITT-FALSE of data (poly 0x1021, init 0xFFFF,
// no reflection, no final xor). CRC16([]byte("123456789")) == 0x29B1.
func CRC16(data []byte) uint16 {
	return UpdateCRC16(CRC16Init, data)
}

// UpdateCRC16 continues a CRC-16/CCITT-FALSE computation: start with
// CRC16Init and feed the data in any number of pieces.
func UpdateCRC16(crc uint16, data []byte) uint16 {
	for _, b := range data {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^b]
	}
	return crc
}
