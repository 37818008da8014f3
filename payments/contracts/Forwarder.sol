// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

interface IERC20 {
    function transferFrom(address from, address to, uint256 value) external returns (bool);
}

/// Pays through a contract: ETH arrives by an internal call (no plain transaction to the
/// address), and a token payment can be made to revert after its Transfer was emitted.
contract Forwarder {
    function forward(address payable to) external payable {
        (bool ok, ) = to.call{value: msg.value}("");
        require(ok, "forward failed");
    }

    function transferThenRevert(IERC20 token, address to, uint256 value) external {
        token.transferFrom(msg.sender, to, value);
        revert("changed my mind");
    }
}
