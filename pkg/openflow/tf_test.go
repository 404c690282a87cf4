package openflow

// testTableFeatures is table 0 as nagare would describe it.
func testTableFeatures() TableFeatures {
	var match, wild, set []uint32
	for f := Field(0); f < numFields; f++ {
		match = append(match, OXMHeader(f, f.Maskable()))
		wild = append(wild, OXMHeader(f, false))
		if f != FieldInPort && f != FieldInPhyPort && f != FieldMetadata {
			set = append(set, OXMHeader(f, false))
		}
	}
	insts := []TypeID{{Type: uint16(InstTypeGotoTable)}, {Type: uint16(InstTypeWriteMetadata)},
		{Type: uint16(InstTypeWriteActions)}, {Type: uint16(InstTypeApplyActions)},
		{Type: uint16(InstTypeClearActions)}, {Type: uint16(InstTypeMeter)}}
	var acts []TypeID
	for _, a := range []ActionType{ActionTypeOutput, ActionTypeCopyTTLOut, ActionTypeCopyTTLIn,
		ActionTypeSetMPLSTTL, ActionTypeDecMPLSTTL, ActionTypePushVLAN, ActionTypePopVLAN,
		ActionTypePushMPLS, ActionTypePopMPLS, ActionTypeSetQueue, ActionTypeGroup,
		ActionTypeSetNWTTL, ActionTypeDecNWTTL, ActionTypeSetField} {
		acts = append(acts, TypeID{Type: uint16(a)})
	}
	next := []uint8{1, 2, 3}
	return TableFeatures{
		TableID: 0, Name: "classifier", MetadataMatch: ^uint64(0), MetadataWrite: ^uint64(0),
		MaxEntries: 1000000,
		Properties: []TableFeatureProp{
			{Type: TFPInstructions, IDs: insts},
			{Type: TFPInstructionsMiss, IDs: insts},
			{Type: TFPNextTables, Tables: next},
			{Type: TFPNextTablesMiss, Tables: next},
			{Type: TFPWriteActions, IDs: acts},
			{Type: TFPWriteActionsMiss, IDs: acts},
			{Type: TFPApplyActions, IDs: acts},
			{Type: TFPApplyActionsMiss, IDs: acts},
			{Type: TFPMatch, OXMs: match},
			{Type: TFPWildcards, OXMs: wild},
			{Type: TFPWriteSetField, OXMs: set},
			{Type: TFPWriteSetFieldMiss, OXMs: set},
			{Type: TFPApplySetField, OXMs: set},
			{Type: TFPApplySetFieldMiss, OXMs: set},
		},
	}
}
